"""The measurement method of every benchmark, in one place: fresh processes, peak memory, timing against a floor.

Every figure destila's benchmarks report (``destila bench loss|e2e``, the
peers in ``benchmarks/peers``, the lab scripts in ``benchmarks/``) is taken
with these functions, so that two rows of a table are measured alike:

- **one process per configuration**: :func:`run_isolated` runs a worker
  (``"module:function"`` with JSON keyword arguments) in a fresh Python
  process and returns its status (``ok`` / ``oom`` / ``timeout`` / ``error``),
  result and **peak memory above that process's baseline** after imports and
  runtime warm-up (RSS on CPU, ``torch.cuda.max_memory_allocated`` on CUDA;
  :class:`PeakMeter`, :func:`active_meter`). It lives in
  :mod:`destila.eval.measure` because evaluation measures models the same way
  and sits below this package; it is named here as part of the method;
- **time against the floor**: :func:`time_against_floor` times a run (one
  forward + backward) a few times after a warm-up, and after each run times
  the **floor** (:func:`floor_step`: the three bare lm_head GEMMs of the same
  shapes over the same row chunks), so that the ratio compares two
  measurements taken under the same machine load; the median is reported;
- **inputs**: :func:`make_loss_inputs` draws the head and a cache-like
  top-K on the device in row blocks, so that no temporary sits in the peak;
- **training steps**: :func:`step_clock` times each optimizer step of a
  Trainer between two :func:`synchronize` calls.

Naive equivalent of one loss measurement::

    child: build inputs; run(2·chunk rows)                 # warm-up
           for i in range(repeats): t_i = time(run); f_i = time(floor)
           report median(t), median(f), peak memory − baseline
"""

from __future__ import annotations

import math
import statistics
import time

from destila.eval.measure import PeakMeter, active_meter, run_isolated

__all__ = ["run_isolated", "PeakMeter", "active_meter", "time_against_floor", "floor_step", "make_loss_inputs",
           "step_clock", "synchronize"]


def make_loss_inputs(n: int, hidden: int, vocab: int, top_k: int, dtype, device: str, seed: int):
    """Random inputs generated on ``device`` in row blocks (no large temporaries left in the peak)."""
    # heavy: torch
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    h = torch.empty(n, hidden, dtype=dtype, device=device)
    w = torch.empty(vocab, hidden, dtype=dtype, device=device)
    ids = torch.empty(n, top_k, dtype=torch.int32, device=device)
    lp = torch.empty(n, top_k, dtype=torch.float16, device=device)
    # Distinct ids per row without an [N, V] permutation: start + k·step mod V
    # with step coprime to V visits K different tokens.
    steps = torch.tensor([s for s in (1, 3, 5, 7, 11, 13, 17, 19, 23) if math.gcd(s, vocab) == 1], device=device)
    offsets = torch.arange(top_k, device=device)
    block = 4096
    for start in range(0, max(n, vocab), block):
        if start < vocab:
            rows = min(block, vocab - start)
            w[start:start + rows] = torch.randn(rows, hidden, device=device, generator=gen) / math.sqrt(hidden)
        if start < n:
            rows = min(block, n - start)
            h[start:start + rows] = torch.randn(rows, hidden, device=device, generator=gen)
            first = torch.randint(0, vocab, (rows, 1), device=device, generator=gen)
            step = steps[torch.randint(0, len(steps), (rows, 1), device=device, generator=gen)]
            ids[start:start + rows] = (first + step * offsets) % vocab
            # Peaked teacher: the top-K holds 95% of the mass, the tail the rest.
            logits = 2.0 * torch.randn(rows, top_k, device=device, generator=gen)
            lp[start:start + rows] = torch.log_softmax(logits, dim=1) + math.log(0.95)
    tail = torch.full((n,), math.log(0.05), device=device)
    return h.requires_grad_(True), w.requires_grad_(True), ids, lp, tail


def floor_step(h, w, chunk: int) -> None:
    """The three lm_head GEMMs of fwd+bwd over row chunks, into buffers allocated per call as fused does."""
    # heavy: torch
    import torch

    with torch.no_grad():
        rows, vocab = h.shape[0], w.shape[0]
        chunk = min(chunk, rows)
        logits = torch.empty(chunk, vocab, dtype=h.dtype, device=h.device)
        dh, dw = torch.empty_like(h), torch.zeros_like(w)
        for start in range(0, rows, chunk):
            stop = min(start + chunk, rows)
            g = logits[: stop - start]
            torch.mm(h[start:stop], w.t(), out=g)
            torch.mm(g, w, out=dh[start:stop])
            dw.addmm_(g.t(), h[start:stop])


def time_against_floor(run, h, w, *, seq_len: int, chunk_size: int, repeats: int, max_seconds: float,
                       device: str, floor_only: bool = False) -> dict:
    """Time ``run(rows)`` (one fwd+bwd over the first ``rows`` rows) against the floor, in this process.

    Each timed run is followed by a timed run of the floor (:func:`floor_step`
    on the same ``h [N, H]`` and ``w [V, H]``), so that both see the same
    machine load (other processes on a shared machine shift absolute times
    by tens of percent within minutes). Peak memory counts ``run``'s runs
    only, inputs included (everything alive when this is called).
    ``floor_only``: time the floor itself as the run.
    """
    # heavy: torch
    import torch

    meter = active_meter() or PeakMeter(device)
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)

    def floor(rows: int) -> None:
        floor_step(h.detach()[:rows], w.detach(), chunk_size)

    if floor_only:
        run = floor

    def timed(fn, rows: int) -> float:
        h.grad = w.grad = None  # the previous run's gradients are not this run's memory
        sync()
        began = time.perf_counter()
        fn(rows)
        sync()
        return time.perf_counter() - began

    meter.restart_peak()
    timed(run, min(seq_len, 2 * chunk_size))  # warm-up: allocator, kernels, code paths
    peak = meter.peak()
    if not floor_only:
        timed(floor, min(seq_len, 2 * chunk_size))
    times: list[float] = []
    floor_times: list[float] = []
    while len(times) < repeats and (not times or sum(times) + sum(floor_times) < max_seconds):
        meter.restart_peak()
        times.append(timed(run, seq_len))
        peak = max(peak, meter.peak())
        if not floor_only:
            floor_times.append(timed(floor, seq_len))
    floor_times = floor_times or times
    gpu = torch.cuda.get_device_name() if device.startswith("cuda") else None
    return {"times": times, "seconds": statistics.median(times), "repeats_done": len(times),
            "floor_times": floor_times, "floor_seconds": statistics.median(floor_times), "peak_bytes": peak,
            "threads": torch.get_num_threads(), "gpu": gpu}


def step_clock(device: str):
    """A Trainer callback that records each optimizer step's wall time in ``.seconds``."""
    # transformers takes seconds to import: only for the end-to-end benchmark's Trainer
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self):
            self.seconds, self.start = [], None

        def on_step_begin(self, args, state, control, **kwargs):
            synchronize(device)
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            self.seconds.append(time.perf_counter() - self.start)

    return StepClock()


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        # heavy: torch
        import torch

        torch.cuda.synchronize()
