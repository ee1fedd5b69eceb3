"""nvml_watch.py — the device memory a method used, sampled every ~20 ms
while it runs (the benchmarks' requirement: "NVML sampling shows the peak
stayed under the budget").

Two sources, the first that works:
  nvml        libnvidia-ml.so.1 through ctypes (no pynvml needed):
              nvmlDeviceGetMemoryInfo (the card's used bytes) and
              nvmlDeviceGetComputeRunningProcesses_v3 (or _v2; bytes per
              process, where the driver says: in a container the pids may
              be the host's, so per-process figures are matched to our
              pids only when they match)
  nvidia-smi  one long-running `nvidia-smi --query-gpu=memory.used,
              memory.total --format=csv,noheader,nounits -lms 20 -i N`,
              its lines parsed as they come (MiB); no per-process figures
The sampler runs as a thread in the bench's parent, which has no CUDA
context of its own (NVML needs none).

    w = Watch(device=0).start()       # w.source: "nvml", "nvidia-smi", None
    w.mark()                          # baseline: used now (holder included)
    ... the method runs ...
    r = w.stop(pids={...})            # peaks since mark()

stop()/report() give: nvml_source, nvml_samples, nvml_baseline_used,
nvml_peak_used (the card, holder included), nvml_peak_bytes (the method's
own: the sum over its pids where NVML names them, else peak used minus the
baseline), nvml_peak_pids_bytes (or None).
"""

import ctypes
import subprocess
import threading
import time

MiB = 1 << 20
NVML_SUCCESS = 0
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_VALUE_NOT_AVAILABLE = (1 << 64) - 1
MAX_PROCESSES = 64
PERIOD = 0.02


class Memory(ctypes.Structure):                 # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


class ProcessInfo(ctypes.Structure):    # nvmlProcessInfo_t, of _v2 and _v3
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong),
                ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class Nvml:
    """The few NVML calls used, over a loaded library (ctypes.CDLL, or a
    fake with the same functions for the tests)."""

    def __init__(self, lib, device=0):
        self.lib = lib
        if lib.nvmlInit_v2() != NVML_SUCCESS:
            raise OSError("nvmlInit_v2 failed")
        self.handle = ctypes.c_void_p()
        if lib.nvmlDeviceGetHandleByIndex_v2(
                device, ctypes.byref(self.handle)) != NVML_SUCCESS:
            raise OSError(f"nvmlDeviceGetHandleByIndex_v2({device}) failed")
        self.processes_fn = getattr(
            lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or getattr(
            lib, "nvmlDeviceGetComputeRunningProcesses_v2", None)

    @classmethod
    def load(cls, device=0, name="libnvidia-ml.so.1"):
        return cls(ctypes.CDLL(name), device)

    def memory(self):
        """(used, total) bytes of the card."""
        m = Memory()
        if self.lib.nvmlDeviceGetMemoryInfo(self.handle,
                                            ctypes.byref(m)) != NVML_SUCCESS:
            raise OSError("nvmlDeviceGetMemoryInfo failed")
        return m.used, m.total

    def processes(self):
        """{pid: bytes} of the processes with a context on the device whose
        bytes the driver gives; None when it cannot say."""
        if self.processes_fn is None:
            return None
        count = ctypes.c_uint(MAX_PROCESSES)
        infos = (ProcessInfo * MAX_PROCESSES)()
        r = self.processes_fn(self.handle, ctypes.byref(count), infos)
        if r != NVML_SUCCESS:
            return None
        return parse_processes(infos, count.value)


def parse_processes(infos, count):
    out = {}
    for i in range(min(count, len(infos))):
        used = infos[i].usedGpuMemory
        if used == NVML_VALUE_NOT_AVAILABLE:
            continue
        out[int(infos[i].pid)] = out.get(int(infos[i].pid), 0) + int(used)
    return out


def parse_smi_line(line):
    """(used, total) bytes from a line of `nvidia-smi --query-gpu=
    memory.used,memory.total --format=csv,noheader,nounits` (MiB), or None
    for a line that is not one ('[N/A]', a header, an error)."""
    parts = [p.strip() for p in line.strip().split(",")]
    if len(parts) < 1 or not parts[0]:
        return None
    try:
        used = int(float(parts[0]) * MiB)
        total = int(float(parts[1]) * MiB) if len(parts) > 1 else None
    except ValueError:
        return None
    return used, total


def smi_command(device, period=PERIOD):
    return ["nvidia-smi", "--query-gpu=memory.used,memory.total",
            "--format=csv,noheader,nounits", "-lms",
            str(max(1, int(period * 1000))), "-i", str(device)]


class Peaks:
    """What the samples add up to since the last mark(); no I/O, so the
    tests feed it directly."""

    def __init__(self):
        self.lock = threading.Lock()
        self.total = None
        self.samples = 0
        self.baseline = None
        self.peak_used = None
        self.peak_pids = None
        self.pids = set()
        self.last_used = None
        self.last_procs = None

    def mark(self, pids=()):
        with self.lock:
            self.baseline = self.last_used
            self.peak_used = self.last_used
            self.peak_pids = None
            self.samples = 0
            self.pids = set(pids)

    def watch_pids(self, *pids):
        with self.lock:
            self.pids.update(p for p in pids if p)

    def add(self, used, total=None, procs=None):
        with self.lock:
            if total:
                self.total = total
            self.last_used = used
            self.last_procs = procs
            self.samples += 1
            if self.peak_used is None or used > self.peak_used:
                self.peak_used = used
            if procs is not None and self.pids:
                mine = sum(b for p, b in procs.items() if p in self.pids)
                if any(p in self.pids for p in procs):
                    if self.peak_pids is None or mine > self.peak_pids:
                        self.peak_pids = mine

    def report(self, source):
        with self.lock:
            if self.peak_used is None:
                return {"nvml_source": source, "nvml_samples": self.samples,
                        "nvml_peak_bytes": None, "nvml_peak_used": None,
                        "nvml_baseline_used": None,
                        "nvml_peak_pids_bytes": None, "nvml_total": None}
            over = self.peak_used - (self.baseline or 0)
            return {"nvml_source": source, "nvml_samples": self.samples,
                    "nvml_total": self.total,
                    "nvml_baseline_used": self.baseline,
                    "nvml_peak_used": self.peak_used,
                    "nvml_peak_pids_bytes": self.peak_pids,
                    "nvml_peak_bytes": self.peak_pids
                    if self.peak_pids is not None else over}


class Watch:
    """The sampler thread (see the module comment). source is None when
    neither NVML nor nvidia-smi answered: reports then say so."""

    def __init__(self, device=0, period=PERIOD, nvml=None, smi=True):
        self.device = device
        self.period = period
        self.peaks = Peaks()
        self.stop_event = threading.Event()
        self.thread = None
        self.proc = None
        self.source = None
        self.error = None
        self.nvml = nvml
        self.smi = smi

    def start(self):
        if self.nvml is None:
            try:
                self.nvml = Nvml.load(self.device)
            except (OSError, AttributeError) as e:
                self.error = f"nvml: {e}"
                self.nvml = None
        if self.nvml is not None:
            self.source = "nvml"
            self.thread = threading.Thread(target=self._run_nvml, daemon=True)
        elif self.smi:
            try:
                self.proc = subprocess.Popen(
                    smi_command(self.device, self.period),
                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True)
                self.source = "nvidia-smi"
                self.thread = threading.Thread(target=self._run_smi,
                                               daemon=True)
            except OSError as e:
                self.error = (self.error + "; " if self.error else "") + \
                    f"nvidia-smi: {e}"
        if self.thread is not None:
            self.thread.start()
            self._wait_sample()
        return self

    def _wait_sample(self, timeout=5.0):
        end = time.monotonic() + timeout
        while self.peaks.last_used is None and time.monotonic() < end:
            time.sleep(self.period)

    def _run_nvml(self):
        while not self.stop_event.is_set():
            try:
                used, total = self.nvml.memory()
                self.peaks.add(used, total, self.nvml.processes())
            except OSError as e:
                self.error = str(e)
            self.stop_event.wait(self.period)

    def _run_smi(self):
        for line in self.proc.stdout:
            if self.stop_event.is_set():
                break
            got = parse_smi_line(line)
            if got is not None:
                self.peaks.add(got[0], got[1])

    def mark(self, pids=()):
        """A new baseline (the card's used bytes now) and peaks from now;
        `pids`: the method's processes (more with watch_pids())."""
        if self.source is not None:
            self._wait_sample()
            time.sleep(2 * self.period)
        self.peaks.mark(pids)

    def watch_pids(self, *pids):
        self.peaks.watch_pids(*pids)

    def report(self):
        r = self.peaks.report(self.source)
        if self.source is None:
            r["nvml_error"] = self.error
        return r

    def close(self):
        self.stop_event.set()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.thread is not None:
            self.thread.join(timeout=2)


def verdict(report, budget, margin, holder_held=None):
    """Whether the method stayed under its budget: its own peak (NVML's
    per-process sum, else the card's peak minus the baseline) at most
    budget + margin; and, with a holder, the card's peak at most the
    baseline (holder included) + budget + margin. None when nothing was
    sampled."""
    peak = report.get("nvml_peak_bytes")
    if peak is None:
        return None
    ok = peak <= budget + margin
    base = report.get("nvml_baseline_used")
    if holder_held is not None and base is not None:
        ok = ok and report["nvml_peak_used"] <= base + budget + margin
    return ok
