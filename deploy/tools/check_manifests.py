#!/usr/bin/env python3
"""check_manifests.py — offline checks of deploy/kubernetes/*.yaml that no
cluster is needed for: every document parses, has apiVersion, kind and
metadata.name; pod specs (DaemonSet, Pod) have unique container names,
volume mounts that name defined volumes, ports that are numbers in range
with unique names, probes that name a port the container has, and images;
Services select pods that exist in the set and target ports they name; the
DaemonSet, its ConfigMap and the client pod agree with each other and with
the config (socket path, groups, metrics ports).

Usage: check_manifests.py DIR. Prints one line per problem and exits 1 if
there was any; 0 otherwise.
"""
import configparser
import glob
import os
import sys

import yaml

problems = []


def problem(where, text):
    problems.append(f"{where}: {text}")


def pod_spec(doc):
    kind = doc.get("kind")
    spec = doc.get("spec") or {}
    if kind == "Pod":
        return spec
    if kind in ("DaemonSet", "Deployment", "StatefulSet", "Job"):
        return (spec.get("template") or {}).get("spec") or {}
    return None


def pod_labels(doc):
    if doc.get("kind") == "Pod":
        return (doc.get("metadata") or {}).get("labels") or {}
    return (((doc.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def check_probe_port(where, probe, port_names, port_numbers):
    for kind in ("httpGet", "tcpSocket", "grpc"):
        if kind in probe:
            port = probe[kind].get("port")
            if isinstance(port, str) and port not in port_names:
                problem(where, f"probe port '{port}' is not a port name of the container")
            if isinstance(port, int) and port_numbers and port not in port_numbers:
                # A probe may target a port not declared; note it only.
                pass
    if "exec" in probe and not probe["exec"].get("command"):
        problem(where, "exec probe without a command")


def check_pod(where, spec):
    volumes = spec.get("volumes") or []
    vol_names = [v.get("name") for v in volumes]
    if len(vol_names) != len(set(vol_names)):
        problem(where, f"duplicate volume names {vol_names}")
    for v in volumes:
        sources = [k for k in v if k != "name"]
        if len(sources) != 1:
            problem(where, f"volume {v.get('name')} has {len(sources)} sources {sources}")
    all_containers = (spec.get("initContainers") or []) + (spec.get("containers") or [])
    if not spec.get("containers"):
        problem(where, "no containers")
    names = [c.get("name") for c in all_containers]
    if len(names) != len(set(names)):
        problem(where, f"duplicate container names {names}")
    used_volumes = set()
    all_port_names = []
    for c in all_containers:
        cw = f"{where} container {c.get('name')}"
        if not c.get("image"):
            problem(cw, "no image")
        mounts = c.get("volumeMounts") or []
        paths = [m.get("mountPath") for m in mounts]
        if len(paths) != len(set(paths)):
            problem(cw, f"duplicate mountPath {paths}")
        for m in mounts:
            if m.get("name") not in vol_names:
                problem(cw, f"volumeMount '{m.get('name')}' names no volume of the pod")
            if not str(m.get("mountPath", "")).startswith("/"):
                problem(cw, f"mountPath '{m.get('mountPath')}' is not absolute")
            used_volumes.add(m.get("name"))
        port_names, port_numbers = set(), set()
        for p in c.get("ports") or []:
            n = p.get("containerPort")
            if not isinstance(n, int) or not 0 < n < 65536:
                problem(cw, f"containerPort {n!r} is not a port number")
            port_numbers.add(n)
            if "name" in p:
                if len(p["name"]) > 15:
                    problem(cw, f"port name '{p['name']}' is longer than 15 characters")
                port_names.add(p["name"])
                all_port_names.append(p["name"])
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in c:
                check_probe_port(f"{cw} {probe}", c[probe], port_names, port_numbers)
        for e in c.get("env") or []:
            if "value" in e and not isinstance(e["value"], str):
                problem(cw, f"env {e.get('name')} value {e['value']!r} is not a string")
        sc = c.get("securityContext") or {}
        caps = (sc.get("capabilities") or {})
        if "drop" in caps and "ALL" not in caps["drop"]:
            problem(cw, "capabilities do not drop ALL")
    for v in vol_names:
        if v not in used_volumes:
            problem(where, f"volume '{v}' is mounted by no container")
    if len(all_port_names) != len(set(all_port_names)):
        problem(where, f"duplicate port names across containers {all_port_names}")
    return all_port_names


def mount_of(spec, container, path):
    """The volume behind mountPath `path` of container `container`."""
    vols = {v["name"]: v for v in spec.get("volumes") or []}
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        if c.get("name") != container:
            continue
        for m in c.get("volumeMounts") or []:
            if m.get("mountPath") == path:
                return vols.get(m.get("name"))
    return None


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def main(directory):
    docs = []
    for path in sorted(glob.glob(os.path.join(directory, "*.yaml"))):
        name = os.path.basename(path)
        try:
            with open(path) as f:
                loaded = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            problem(name, f"does not parse: {e}")
            continue
        for d in loaded:
            docs.append((name, d))

    pods = {}
    for name, d in docs:
        where = f"{name} {d.get('kind')}/{(d.get('metadata') or {}).get('name')}"
        for key in ("apiVersion", "kind"):
            if not d.get(key):
                problem(name, f"a document has no {key}")
        if d.get("kind") != "Kustomization" and not (d.get("metadata") or {}).get("name"):
            problem(name, "a document has no metadata.name")
        spec = pod_spec(d)
        if spec is not None:
            ports = check_pod(where, spec)
            pods[(d["kind"], d["metadata"]["name"])] = (d, spec, ports)
            if d["kind"] != "Pod":
                sel = ((d.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
                labels = pod_labels(d)
                if not sel or any(labels.get(k) != v for k, v in sel.items()):
                    problem(where, f"selector {sel} does not match the template's labels {labels}")

    for name, d in docs:
        if d.get("kind") != "Service":
            continue
        where = f"{name} Service/{d['metadata']['name']}"
        sel = (d.get("spec") or {}).get("selector") or {}
        targets = [(p, pod_labels(p)) for p, _, _ in pods.values()]
        matched = [p for p, labels in targets
                   if labels and all(labels.get(k) == v for k, v in sel.items())]
        if not matched:
            problem(where, f"selector {sel} matches no pod template here")
        for p in (d.get("spec") or {}).get("ports") or []:
            t = p.get("targetPort")
            if isinstance(t, str):
                for m in matched:
                    if t not in pods[(m["kind"], m["metadata"]["name"])][2]:
                        problem(where, f"targetPort '{t}' is no port name of {m['kind']}/{m['metadata']['name']}")

    # The pieces of gpu-memd's own setup agree with one another.
    ds = pods.get(("DaemonSet", "gpu-memd"))
    cm = next((d for _, d in docs if d.get("kind") == "ConfigMap"
               and d["metadata"]["name"] == "gpu-memd-config"), None)
    client = next((v for k, v in pods.items() if k[0] == "Pod"), None)
    if not ds or not cm:
        problem(directory, "no DaemonSet gpu-memd or ConfigMap gpu-memd-config")
    else:
        _, spec, ports = ds
        conf = configparser.ConfigParser(strict=False, interpolation=None,
                                         inline_comment_prefixes=None)
        conf.read_string(cm["data"]["gpu-memd.conf"])
        socket = conf.get("daemon", "socket")
        sockdir = os.path.dirname(socket)
        daemon = next(c for c in spec["containers"] if c["name"] == "gpu-memd")
        if socket not in daemon.get("command", []) + sum(
                (p.get("exec", {}).get("command", []) for p in
                 (daemon.get(k) or {} for k in ("livenessProbe", "readinessProbe", "startupProbe"))), []):
            problem("daemonset.yaml", f"the probes do not name the config's socket {socket}")
        vol = mount_of(spec, "gpu-memd", sockdir)
        if not vol or (vol.get("hostPath") or {}).get("path") != sockdir:
            problem("daemonset.yaml", f"{sockdir} is not a hostPath mount of the gpu-memd container")
        cfgvol = mount_of(spec, "gpu-memd", "/etc/gpu-memd")
        if not cfgvol or (cfgvol.get("configMap") or {}).get("name") != "gpu-memd-config":
            problem("daemonset.yaml", "/etc/gpu-memd is not the gpu-memd-config ConfigMap")
        listen = conf.get("metrics", "listen")
        relay = next((c for c in spec["containers"] if c["name"] == "metrics-proxy"), None)
        if relay is None or not any(listen in a for a in relay.get("command", [])):
            problem("daemonset.yaml", f"the metrics relay does not forward to [metrics] listen = {listen}")
        sc = spec.get("securityContext") or {}
        env = env_of(daemon)
        if env.get("NVIDIA_VISIBLE_DEVICES") != "all":
            problem("daemonset.yaml", "the daemon does not set NVIDIA_VISIBLE_DEVICES=all")
        limits = ((daemon.get("resources") or {}).get("limits") or {})
        if any(k.startswith("nvidia.com/") for k in limits):
            problem("daemonset.yaml", "the daemon requests GPUs from the device plugin")
        if client:
            cd, cspec, _ = client
            csc = cspec.get("securityContext") or {}
            if not csc.get("runAsNonRoot"):
                problem("client-pod.yaml", "the client may run as root (an admin of the daemon)")
            if not set(csc.get("supplementalGroups") or []) & set(sc.get("supplementalGroups") or []):
                problem("client-pod.yaml", "the client shares no group with the daemon's socket group")
            cvol = None
            for c in cspec["containers"]:
                e = env_of(c)
                if e.get("GPU_MEMD_SOCKET") != socket:
                    problem("client-pod.yaml", f"container {c['name']}: GPU_MEMD_SOCKET is not {socket}")
                cvol = mount_of(cspec, c["name"], sockdir)
                if not cvol or (cvol.get("hostPath") or {}).get("path") != sockdir:
                    problem("client-pod.yaml", f"container {c['name']} does not mount {sockdir} from the host")

    for p in problems:
        print(p)
    print(f"check_manifests: {len(docs)} documents, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "deploy/kubernetes"))
