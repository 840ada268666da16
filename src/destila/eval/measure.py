"""Run one benchmark configuration in a fresh Python process and measure its peak memory.

Any benchmark uses this the same way: a worker is a plain function named as
``"package.module:function"``, called with JSON keyword arguments in a child
process, returning a JSON-able dict. The child

1. imports the worker's module (and so torch) and warms the runtime (thread
   pools, CUDA context), so that one-time costs sit in the baseline;
2. takes the baseline: on CPU, writes ``5`` to ``/proc/self/clear_refs``
   (Linux resets the peak-RSS counter ``VmHWM`` to the current RSS) and
   reads ``VmRSS``; on CUDA, ``torch.cuda.memory_allocated()`` after
   ``reset_peak_memory_stats()``;
3. optionally caps its address space (``RLIMIT_AS``) at the baseline plus a
   budget, so a configuration that would not fit fails inside the child
   with an allocation error instead of pushing the machine into swap or the
   OOM killer;
4. calls the worker; everything it allocates, inputs included, counts;
5. reports ``peak_bytes`` = ``VmHWM − baseline`` (CPU) or
   ``max_memory_allocated − baseline`` (CUDA). A worker that runs a
   reference it must not be charged for can measure its own phases with
   :func:`active_meter` and return ``peak_bytes`` itself (same baseline).

Statuses: ``ok``; ``oom`` (an allocation failed, or the child was killed by
SIGKILL, which on Linux is the OOM killer's signal); ``timeout``; ``error``
(any other exception or crash; ``error`` holds its last line).

Naive equivalent: ``subprocess.run([sys.executable, "-c", "import m; print(m.f(**kw))"])``
plus the memory bookkeeping above.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from destila.io import write_atomic

_OOM_MARKERS = ("can't allocate memory", "not enough memory", "out of memory", "cannot allocate memory")
# Address-space headroom above the budget: thread stacks, malloc arenas and
# library mappings reserve virtual memory they never touch.
_ADDRESS_SLACK = 1 << 30


def run_isolated(target: str, kwargs: dict | None = None, *, device: str = "cpu", timeout: float | None = None,
                 memory_limit: int | None = None, threads: int | None = None) -> dict:
    """Run ``target(**kwargs)`` in a child process; return ``{"status", "peak_bytes", "baseline_bytes",
    "wall_seconds", "error", "result"}`` where ``result`` is the worker's dict (None unless ``ok``).

    target: ``"module:function"``. memory_limit: bytes the child may add above
    its baseline (CPU only; on CUDA the device's own limit applies).
    """
    spec = {"target": target, "kwargs": kwargs or {}, "device": device, "memory_limit": memory_limit,
            "threads": threads}
    with tempfile.TemporaryDirectory(prefix="destila-bench-") as tmp:
        out = Path(tmp) / "result.json"
        spec["output"] = str(out)
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "destila.eval.measure"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        try:
            _, stderr = proc.communicate(json.dumps(spec), timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: takes any helper processes with it
            proc.communicate()
            return _failure("timeout", f"no result after {timeout:g} s", started)
        wall = time.perf_counter() - started
        if out.exists():
            report = json.loads(out.read_text())
            report["wall_seconds"] = wall
            return report
    last = (stderr or "").strip().splitlines()[-1:] or [""]
    if proc.returncode == -signal.SIGKILL:
        return _failure("oom", f"killed by SIGKILL (the kernel's OOM killer?) {last[0]}".strip(), started)
    status = "oom" if any(m in last[0].lower() for m in _OOM_MARKERS) else "error"
    return _failure(status, f"exit code {proc.returncode}: {last[0]}", started)


def _failure(status: str, error: str, started: float) -> dict:
    return {"status": status, "peak_bytes": None, "baseline_bytes": None,
            "wall_seconds": time.perf_counter() - started, "error": error, "result": None}


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024  # reported in kB
    raise RuntimeError(f"/proc/self/status has no {key}: peak memory needs Linux")


class PeakMeter:
    """Peak memory above a baseline taken at construction (RSS on CPU, allocator bytes on CUDA).

    ``peak()`` is the highest usage since the baseline, or since the last
    ``restart_peak()``, always measured from the same baseline: a worker
    that also runs something it must not be charged for (a reference timed
    in the same process) restarts the peak before each phase it reports.
    """

    def __init__(self, device: str):
        # heavy: torch
        import torch

        self.cuda = device.startswith("cuda")
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.baseline = torch.cuda.memory_allocated()
        else:
            self.restart_peak()
            self.baseline = _proc_status_bytes("VmRSS")

    def restart_peak(self) -> None:
        """Forget the peak so far: from now on the peak counts from current usage up."""
        if self.cuda:
            # heavy: torch
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        else:
            Path("/proc/self/clear_refs").write_text("5")  # Linux: VmHWM := current RSS

    def peak(self) -> int:
        # heavy: torch
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.max_memory_allocated() - self.baseline
        return _proc_status_bytes("VmHWM") - self.baseline


_ACTIVE: PeakMeter | None = None


def active_meter() -> PeakMeter | None:
    """The meter of the isolated run this process is (None outside :func:`run_isolated`)."""
    return _ACTIVE


def _warm_up(device: str) -> None:
    """One small GEMM and elementwise op so thread pools, BLAS and the CUDA context exist before the baseline."""
    # heavy: torch
    import torch

    x = torch.randn(256, 256, device=device)
    (x @ x).exp_().sum().item()


def _is_oom(err: BaseException) -> bool:
    # heavy: torch
    import torch

    if isinstance(err, (MemoryError, torch.OutOfMemoryError)):
        return True
    return isinstance(err, RuntimeError) and any(m in str(err).lower() for m in _OOM_MARKERS)


def _child(spec: dict) -> dict:
    # resource is Unix-only: only the worker process caps its memory with it
    import resource

    module_name, _, func_name = spec["target"].partition(":")
    worker = getattr(importlib.import_module(module_name), func_name)
    # heavy: torch
    import torch

    if spec.get("threads"):
        torch.set_num_threads(int(spec["threads"]))
    device = spec["device"]
    _warm_up(device)
    global _ACTIVE
    meter = _ACTIVE = PeakMeter(device)
    limit = spec.get("memory_limit")
    if limit and not device.startswith("cuda"):
        cap = _proc_status_bytes("VmSize") + int(limit) + _ADDRESS_SLACK
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    report = {"status": "ok", "peak_bytes": None, "baseline_bytes": meter.baseline, "error": None, "result": None}
    try:
        report["result"] = worker(**spec["kwargs"])
        # A worker that measured its own phases (restart_peak) reports that peak.
        own = report["result"].get("peak_bytes") if isinstance(report["result"], dict) else None
        report["peak_bytes"] = meter.peak() if own is None else own
    except BaseException as err:  # noqa: BLE001 - every failure becomes a status, not a crash of the sweep
        report["status"] = "oom" if _is_oom(err) else "error"
        lines = traceback.format_exception_only(type(err), err)
        report["error"] = lines[-1].strip()[:500]
    return report


def main() -> None:
    spec = json.loads(sys.stdin.read())
    # Run as __main__, this file is a second copy of the module: use the
    # importable one, whose active_meter() the worker will see.
    from destila.eval import measure

    report = measure._child(spec)
    write_atomic(spec["output"], json.dumps(report))  # the parent reads it whole, or finds none


if __name__ == "__main__":
    main()
