#!/bin/sh
# check.sh — every offline check of deploy/ this machine has the tools for.
# A check whose tool is missing prints "SKIP: ..." and does not fail the
# run; a check that runs and finds a problem fails it (exit 1).
#
#   sh deploy/check.sh [BUILD]
#
# BUILD is a build folder with daemon/gpu-memd (default: build, else any
# build-*/ that has one): the configs are then parsed by the daemon itself
# (--print-config) and the metrics rules are run against a live scrape of
# a sim daemon. Tools, all Debian packages except the last:
#   promtool (prometheus)       rules, rule unit tests, scrape config, and
#                               the daemon's exposition text
#   yamllint (yamllint)         YAML style and syntax
#   python3 + PyYAML (python3-yaml)  structure of the Kubernetes manifests
#                               (deploy/tools/check_manifests.py)
#   kubectl (kubernetes-client) kustomize rendering (no cluster needed)
#   the shell linter (Debian package shellcheck): the shell scripts
#   socat (socat)               the metrics relay the DaemonSet runs
#   hadolint                    the Dockerfile (not packaged by Debian 12)
#   node + npm kubernetes-models  API schema validation of the manifests
#                               (deploy/tools/k8s-schema.mjs), from
#                               K8S_MODELS_DIR (npm install --prefix DIR
#                               kubernetes-models@5
#                               @kubernetes-models/prometheus-operator)
set -u

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
cd "$root" || exit 1

failed=0
tmp=$(mktemp -d)
daemon_pid=""
relay_pid=""
cleanup() {
        [ -n "$relay_pid" ] && kill "$relay_pid" 2>/dev/null
        [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null
        rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

have() { command -v "$1" >/dev/null 2>&1; }
ok() { echo "ok: $*"; }
fail() { echo "FAIL: $*"; failed=1; }
skip() { echo "SKIP: $*"; }

# run NAME COMMAND...: run a check, its output indented, ok or FAIL.
run() {
        name=$1
        shift
        if "$@" >"$tmp/out" 2>&1; then
                ok "$name"
        else
                sed 's/^/    /' "$tmp/out"
                fail "$name"
        fi
}

# A python3 with PyYAML: Debian's first (python3-yaml), then PATH's.
py=""
for p in /usr/bin/python3 python3; do
        if have "$p" && "$p" -c 'import yaml' 2>/dev/null; then
                py=$p
                break
        fi
done

# The daemon, for config and metrics checks.
build=${1:-}
if [ -z "$build" ]; then
        for b in build build-*; do
                if [ -x "$b/daemon/gpu-memd" ]; then
                        build=$b
                        break
                fi
        done
fi
gpumemd=""
[ -n "$build" ] && [ -x "$build/daemon/gpu-memd" ] && gpumemd=$build/daemon/gpu-memd

# ---- Prometheus --------------------------------------------------------
if have promtool; then
        run "promtool check rules deploy/prometheus/gpu-memd.rules.yml" \
                promtool check rules deploy/prometheus/gpu-memd.rules.yml
        run "promtool test rules deploy/prometheus/gpu-memd.rules.test.yml" \
                sh -c 'cd deploy/prometheus && promtool test rules gpu-memd.rules.test.yml'
        # The scrape snippet inside a minimal prometheus.yml.
        {
                echo "global: {scrape_interval: 30s}"
                echo "rule_files: [\"$root/deploy/prometheus/gpu-memd.rules.yml\"]"
                cat deploy/prometheus/scrape.yml
        } >"$tmp/prometheus.yml"
        # Debian's prometheus is built without Kubernetes service
        # discovery: its promtool does not know kubernetes_sd_configs. Then
        # the jobs that use it are left out, and said so.
        if promtool check config "$tmp/prometheus.yml" >"$tmp/out" 2>&1; then
                ok "promtool check config (scrape.yml in a prometheus.yml)"
        elif grep -q 'kubernetes_sd_configs not found' "$tmp/out" && [ -n "$py" ]; then
                "$py" -c 'import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
d["scrape_configs"] = [j for j in d["scrape_configs"] if "kubernetes_sd_configs" not in j]
yaml.safe_dump(d, open(sys.argv[1], "w"))' "$tmp/prometheus.yml"
                skip "this promtool has no Kubernetes service discovery (Debian's build): scrape jobs with kubernetes_sd_configs not checked"
                run "promtool check config (scrape.yml's other jobs in a prometheus.yml)" \
                        promtool check config "$tmp/prometheus.yml"
        else
                sed 's/^/    /' "$tmp/out"
                fail "promtool check config (scrape.yml in a prometheus.yml)"
        fi
else
        skip "promtool not installed (apt-get install prometheus): rules, rule tests and scrape config not checked"
fi

# ---- YAML --------------------------------------------------------------
if have yamllint; then
        run "yamllint deploy/kubernetes deploy/prometheus" \
                yamllint -s -c deploy/.yamllint deploy/kubernetes deploy/prometheus
else
        skip "yamllint not installed (apt-get install yamllint)"
fi

# ---- Kubernetes --------------------------------------------------------
if [ -n "$py" ]; then
        run "manifest structure (deploy/tools/check_manifests.py)" \
                "$py" deploy/tools/check_manifests.py deploy/kubernetes
else
        skip "python3 with PyYAML not found (apt-get install python3-yaml): manifest structure not checked"
fi

if have kubectl; then
        run "kubectl kustomize deploy/kubernetes" \
                sh -c 'kubectl kustomize deploy/kubernetes >/dev/null'
else
        skip "kubectl not installed (apt-get install kubernetes-client): kustomization not rendered"
fi

models=${K8S_MODELS_DIR:-}
if [ -z "$models" ] || [ ! -d "$models/node_modules/kubernetes-models" ]; then
        skip "kubernetes-models not found (set K8S_MODELS_DIR; see this script's header): no API schema validation"
elif ! have node || [ -z "$py" ]; then
        skip "node or python3 with PyYAML missing: no API schema validation"
else
        # k8s-schema.mjs runs "python3": the one with PyYAML first.
        schemas() {
                PATH="$(dirname "$(command -v "$py")"):$PATH" \
                        node deploy/tools/k8s-schema.mjs "$models" deploy/kubernetes/*.yaml
        }
        run "API schemas (deploy/tools/k8s-schema.mjs, kubernetes-models)" schemas
fi

# ---- Dockerfile --------------------------------------------------------
if have hadolint; then
        run "hadolint deploy/container/Dockerfile" hadolint deploy/container/Dockerfile
else
        skip "hadolint not installed (Debian 12 has no package): Dockerfile not linted"
fi

# ---- Shell scripts -----------------------------------------------------
if have shellcheck; then
        run "shellcheck deploy/*.sh deploy/slurm/*.sh deploy/slurm/train.sbatch" \
                shellcheck deploy/check.sh deploy/slurm/gpu-memd-quotas.sh \
                deploy/slurm/taskprolog.sh deploy/slurm/prolog.sh deploy/slurm/train.sbatch
else
        skip "shellcheck not installed (apt-get install shellcheck)"
fi

# ---- Slurm quota generator ---------------------------------------------
# Users that exist on any Debian machine, so the daemon can resolve them.
printf 'root|inference\ndaemon|students\nbin|vision-lab\nnobody|no-policy\ndaemon|other\n' \
        >"$tmp/users"
printf '[daemon]\nbackend = sim\n\n[users]\nvram_quota = 40G\n' >"$tmp/base.conf"
quotas_ok() {
        sh deploy/slurm/gpu-memd-quotas.sh "$tmp/base.conf" \
                deploy/slurm/accounts.policy.example "$tmp/users" >"$tmp/quotas.conf" || return 1
        # Three users with a policy, nobody without, daemon only once.
        [ "$(grep -c '^\[user ' "$tmp/quotas.conf")" = 3 ] || return 1
        grep -q '^\[user daemon\]' "$tmp/quotas.conf" || return 1
        ! grep -q '^\[user nobody\]' "$tmp/quotas.conf" || return 1
        # Past 128 sections it refuses.
        i=0
        while [ $i -lt 130 ]; do echo "u$i|students"; i=$((i + 1)); done >"$tmp/many"
        if sh deploy/slurm/gpu-memd-quotas.sh "$tmp/base.conf" \
                deploy/slurm/accounts.policy.example "$tmp/many" >/dev/null 2>&1; then
                echo "130 users were accepted"
                return 1
        fi
        if [ -n "$gpumemd" ]; then
                "$gpumemd" --config "$tmp/quotas.conf" --print-config >/dev/null || return 1
        fi
        return 0
}
run "slurm/gpu-memd-quotas.sh${gpumemd:+ (output parsed by gpu-memd)}" quotas_ok

# ---- Configs, parsed by the daemon itself -------------------------------
# Names of groups and users that exist only on the target machines (the
# image's gpu-memd groups, a site's Slurm groups) are replaced by ones
# that exist here: what is checked is every key and value.
if [ -z "$gpumemd" ]; then
        skip "no built gpu-memd (make, or pass a build folder): configs not parsed by the daemon, no live scrape"
elif [ -z "$py" ]; then
        skip "python3 with PyYAML not found: the ConfigMap's config not extracted"
else
        localize() {
                sed -e 's/^\(socket_group\|admin_group\) = .\+/\1 = root/' \
                    -e 's/^\[group [^]0-9][^]]*\]/[group 0]/' \
                    -e 's/^\[user [^]0-9][^]]*\]/[user 0]/' "$1"
        }
        "$py" -c 'import sys, yaml; sys.stdout.write(yaml.safe_load(open(sys.argv[1]))["data"]["gpu-memd.conf"])' \
                deploy/kubernetes/configmap.yaml >"$tmp/cm.conf"
        localize "$tmp/cm.conf" >"$tmp/cm.local.conf"
        run "ConfigMap's gpu-memd.conf (gpu-memd --print-config)" \
                "$gpumemd" --config "$tmp/cm.local.conf" --print-config
        localize deploy/slurm/gpu-memd.conf.example >"$tmp/slurm.local.conf"
        run "slurm/gpu-memd.conf.example (gpu-memd --print-config)" \
                "$gpumemd" --config "$tmp/slurm.local.conf" --print-config

        # A sim daemon on the ConfigMap's config (socket and port moved to
        # this run's own), scraped through the relay the DaemonSet runs.
        port=$((20000 + $$ % 20000))
        sed -e "s#^socket = .*#socket = $tmp/gpu-memd.sock#" \
            -e 's/^backend = .*/backend = sim/' \
            -e "s/^listen = .*/listen = 127.0.0.1:$port/" \
            -e 's/^host_limit = .*/host_limit = 256M/' \
            -e 's/^host_stock = .*/host_stock = 64M/' \
            "$tmp/cm.local.conf" >"$tmp/live.conf"
        "$gpumemd" --config "$tmp/live.conf" >"$tmp/daemon.log" 2>&1 &
        daemon_pid=$!
        url="http://127.0.0.1:$port/metrics"
        if have socat; then
                socat "TCP-LISTEN:$((port + 1)),bind=127.0.0.1,fork,reuseaddr,max-children=16" \
                        "TCP:127.0.0.1:$port" >/dev/null 2>&1 &
                relay_pid=$!
                url="http://127.0.0.1:$((port + 1))/metrics"
        else
                skip "socat not installed: the metrics relay not exercised (scraping the daemon directly)"
        fi
        scrape() {
                "$py" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' \
                        "$url"
        }
        i=0
        until scrape >"$tmp/metrics" 2>/dev/null; do
                i=$((i + 1))
                if [ $i -ge 50 ]; then
                        break
                fi
                sleep 0.1
        done
        if [ -s "$tmp/metrics" ]; then
                ok "live scrape of a sim daemon on the ConfigMap's config${relay_pid:+, through socat}"
                # Every gpumemd_ name the rules use is exported.
                names_ok() {
                        grep -o 'gpumemd_[a-z_]*' deploy/prometheus/gpu-memd.rules.yml | sort -u |
                        while read -r m; do
                                grep -q "^${m}[{ ]" "$tmp/metrics" || { echo "not exported: $m"; exit 1; }
                        done
                }
                run "every metric the rules use is in the scrape" names_ok
                if have promtool; then
                        lint_metrics() { promtool check metrics <"$tmp/metrics"; }
                        run "promtool check metrics (the daemon's exposition)" lint_metrics
                fi
        else
                sed 's/^/    /' "$tmp/daemon.log"
                fail "live scrape of a sim daemon on the ConfigMap's config"
        fi
fi

if [ $failed -ne 0 ]; then
        echo "deploy/check.sh: some checks failed"
        exit 1
fi
echo "deploy/check.sh: all checks that ran passed"
