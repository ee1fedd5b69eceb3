"""common.py — what the torch benches share: in their child processes the
same deterministic PyTorch set-up, the Llama generation bench_torch.py and
profile_llama.py both run, and the readers of gpu-memd's figures (the
shim's counters, the VRAM pool's bytes moved); in their parents the
daemon bench_offload.py and bench_cotenancy.py start for a method and the
environment its children get.

Not a script: each bench puts its own folder first on sys.path and imports
it, so it is found whatever the current directory.
"""

import json
import os
import subprocess
import tempfile
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                     "..", ".."))


def setup_determinism():
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    torch.manual_seed(1234)
    torch.cuda.manual_seed_all(1234)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    return torch


def llama_generation():
    """The Llama both torch benches generate with (bench_torch.py's llama
    workload, profile_llama.py): 8 layers of 1024, bf16, eager attention,
    random weights, on the GPU; its prompt, 32 x 64 tokens from a seeded
    generator; and generate()'s keyword arguments, 128 new tokens, greedy,
    logits returned. After setup_determinism(). (model, prompt, kwargs)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(hidden_size=1024, intermediate_size=2816,
                         num_hidden_layers=8, num_attention_heads=16,
                         num_key_value_heads=8, vocab_size=32000,
                         max_position_embeddings=2048,
                         attn_implementation="eager")
    model = LlamaForCausalLM(config).to("cuda", torch.bfloat16).eval()
    g = torch.Generator(device="cpu").manual_seed(7)
    prompt = torch.randint(0, config.vocab_size, (32, 64), generator=g).cuda()
    kwargs = dict(max_new_tokens=128, min_new_tokens=128, do_sample=False,
                  return_dict_in_generate=True, output_logits=True,
                  pad_token_id=0)
    return model, prompt, kwargs


def shim_stats():
    """The shim's counters when it is preloaded, else None."""
    try:
        with open("/proc/self/maps") as f:
            if "libgpumem_torch.so" not in f.read():
                return None
    except OSError:
        return None
    import gpumem.torch as gt
    if gt._lib is None:
        gt._load(None, None)
    return gt.stats()


def pool_moves(client):
    p = next(p for p in client.status("pools").pools
             if p.tier == "vram" and p.device == 0)
    return {"bytes_out": p.bytes_out, "bytes_in": p.bytes_in,
            "copy_us_out": p.copy_us_out, "copy_us_in": p.copy_us_in}


class Daemon:
    """A cuda gpu-memd of the bench's own ($GMD_DAEMON, else BUILD's) on a
    temporary socket, with `vram_limit` and `host_limit` as given on its
    command line (and `extra` arguments), clients allowed priorities up to
    `max_priority`, `config` (INI text) added to its config file, logging
    to `log`; RuntimeError when it exits at start."""

    def __init__(self, build, log, vram_limit, host_limit, prefix,
                 extra=(), max_priority=100, config=""):
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.socket = os.path.join(self.dir, "sock")
        # A client may ask for up to this priority (GPU_MEMD_PRIORITY):
        # the daemon's default [users] max_priority is 0, which turned
        # the co-tenancy bench's inference job at priority 10 into 0.
        path = os.path.join(self.dir, "gpu-memd.conf")
        with open(path, "w") as f:
            f.write(f"[users]\nmax_priority = {max_priority}\n{config}")
        self.build = build
        self._start(log, "--backend", "cuda", "--socket", self.socket,
                    "--vram-limit", vram_limit, "--host-limit", host_limit,
                    "--config", path, *extra)

    def _start(self, log, *args):
        """Start BUILD's (or $GMD_DAEMON's) gpu-memd with `args` and wait
        for its socket."""
        self.proc = subprocess.Popen(
            [os.environ.get("GMD_DAEMON",
                            os.path.join(self.build, "daemon", "gpu-memd")),
             *args], stdout=log, stderr=subprocess.STDOUT)
        for _ in range(3000):
            if os.path.exists(self.socket) or self.proc.poll() is not None:
                break
            time.sleep(0.01)
        time.sleep(0.2)
        if self.proc.poll() is not None:
            raise RuntimeError(f"gpu-memd exited {self.proc.returncode} at "
                               "start (see the log)")

    @property
    def pid(self):
        return self.proc.pid

    def status(self):
        """gpu-memctl --json status, as a dict (None when it fails)."""
        try:
            p = subprocess.run(
                [os.path.join(self.build, "client", "gpu-memctl"),
                 "--socket", self.socket, "--json", "status"],
                capture_output=True, text=True, timeout=30)
            return json.loads(p.stdout) if p.returncode == 0 else None
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def child_env(build):
    """The environment of a bench's child process: unbuffered output, the
    build's libgpumem and the tree's Python package first on the path."""
    env = dict(os.environ, PYTHONUNBUFFERED="1",
               GPUMEM_LIBRARY=os.path.join(build, "client", "libgpumem.so.0"))
    env["PYTHONPATH"] = os.path.join(ROOT, "client", "python") + \
        (":" + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def run_for_result(argv, env, log, label, timeout, preexec_fn=None):
    """Run a bench's child process (argv), its output and exit status
    written to `log` under `label`, and find the result it prints on a
    line of its own ("RESULT " and JSON). (result or None, the last line
    of its stderr, its exit status; 124 when it ran past `timeout`)."""
    log.write(f"==== {label}\n")
    log.flush()
    t0 = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True,
                           timeout=timeout, preexec_fn=preexec_fn)
        out, err, rc = p.stdout, p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:
        out, err, rc = e.stdout or "", (e.stderr or "") + "\nTIMEOUT", 124
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    log.write(out + err + f"\n==== rc {rc}, {time.monotonic() - t0:.1f} s\n")
    log.flush()
    for line in out.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:]), None, rc
    return None, (err.strip().splitlines() or ["no output"])[-1], rc
