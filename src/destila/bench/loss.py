"""The output-head benchmark: peak memory and fwd+bwd time of each loss impl against sequence length.

For each N in ``seq_lens``, and each impl plus the ``floor``, one fresh
process (:func:`run_isolated`) builds the inputs (hidden ``[N, H]`` and the
head ``[V, H]`` in ``dtype`` requiring grad, a cache-like top-K: int32 ids,
float16 log-probs, float32 tail), runs one warm-up on the first
``2·chunk_size`` rows, then times ``loss.backward()`` up to ``repeats`` times
(stopping early once ``max_seconds`` of timed runs are spent) and reports
the median. Peak memory is the process's peak above its baseline after
imports, inputs included, the same way for every impl.

The **floor** is the bare lm_head GEMMs of a forward+backward of the same
shapes, over the same row chunks (``logits = h Wᵀ``, ``dh = G W``,
``dW += Gᵀ h``, the logits buffer standing in for G), into buffers allocated
per call as the fused loss allocates its own: the time no implementation of
this loss can beat. It has its own row (memory and time, own process), and
every impl's process also times it right after each of its own runs, so
that ``ratio_to_floor`` compares two measurements taken under the same load.

A configuration predicted not to fit ``memory_budget`` is reported
``skipped`` without running; one that fails to allocate is ``oom``, and
larger N for that impl are then ``skipped``. The sweep always goes on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from destila.bench.harness import make_loss_inputs, run_isolated, time_against_floor
from destila.bench.parsing import gib, int_list, name_list
from destila.losses import LossOptions, distill_loss
from destila.losses.plan import auto_chunk_rows, plan_for

WORKER = "destila.bench.loss:loss_worker"
# fused: the default path on these tensors (on CUDA with bf16: precision fast and the Triton row kernels);
# fused-exact: precision="exact" (float32 GEMMs); fused-torch: the row math as eager torch ops.
IMPLS = ("fused", "fused-exact", "fused-torch", "chunked", "dense")
IMPL_OPTIONS = {"fused": {}, "fused-exact": {"impl": "fused", "precision": "exact"},
                "fused-torch": {"impl": "fused", "kernels": "torch"}, "chunked": {}, "dense": {}}
DEFAULT_IMPLS = ("fused", "chunked", "dense")
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Float32 [N, V] arrays' worth of memory at dense's peak (log-softmax, dense
# teacher grid, masks, gradients), measured with this sweep on CPU: +1.28 GiB
# per 2048 rows at V = 32768, i.e. 4.8 grids, plus margin. Used only to skip what cannot fit.
DENSE_GRIDS = 5.2


@dataclass
class LossBenchConfig:
    """One sweep: shapes, impls, and how to measure. Defaults fit a 2-core, 24 GiB CPU machine.

    Each field is a flag of ``destila bench loss`` (its metadata: help, choices, how the text is read).
    """

    hidden: int = field(default=512, metadata={"help": "hidden size H"})
    vocab: int = field(default=32768, metadata={"help": "vocabulary size V"})
    top_k: int = field(default=100, metadata={"help": "teacher entries per row K"})
    seq_lens: tuple[int, ...] = field(default=(2048, 4096, 8192, 16384, 32768, 65536), metadata={
        "help": "comma-separated N", "type": int_list})
    impls: tuple[str, ...] = field(default=DEFAULT_IMPLS, metadata={
        "help": f"comma-separated impls among {', '.join(IMPLS)} (the floor always runs)", "type": name_list})
    dtype: str = field(default="float32", metadata={"help": "inputs' dtype", "choices": list(DTYPE_BYTES)})
    device: str = field(default="cpu", metadata={"help": "cpu or cuda[:i]"})
    chunk_size: int | None = field(default=None, metadata={
        "help": "rows per chunk (fused, chunked, floor); default: the loss's own choice from V, H and the free "
                "memory, recorded in each row"})
    repeats: int = field(default=3, metadata={"help": "timed runs per configuration (median reported)"})
    max_seconds: float = field(default=30.0, metadata={
        "help": "stop repeating a configuration once its timed runs add up to this"})
    timeout: float = field(default=1800.0, metadata={"help": "seconds before a configuration is killed"})
    memory_budget: int | None = field(default=None, metadata={
        "help": "GiB a configuration may use above baseline (predicted larger: skipped; larger in fact: oom); "
                "default from the command line: on CPU 60%% of the memory available at start, on CUDA none",
        "type": gib, "metavar": "GIB"})
    threads: int | None = field(default=None, metadata={"help": "torch threads per configuration (default: torch's)"})
    seed: int = field(default=0, metadata={"help": "seed of the random inputs"})
    extra: dict = field(default_factory=dict)  # written into every row (the machine, the command)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype: expected one of {sorted(DTYPE_BYTES)}, found {self.dtype!r}")
        unknown = [i for i in self.impls if i not in IMPLS]
        if unknown:
            raise ValueError(f"impls: expected some of {', '.join(IMPLS)}, found {unknown}")
        for name in ("hidden", "vocab", "top_k", "chunk_size", "repeats"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name}: expected a positive integer, found {getattr(self, name)}")
        if self.top_k > self.vocab:
            raise ValueError(f"top_k: expected ≤ vocab = {self.vocab}, found {self.top_k}")
        if not self.seq_lens or min(self.seq_lens) < 1:
            raise ValueError(f"seq_lens: expected positive lengths, found {list(self.seq_lens)}")


class OtherRows(Protocol):
    """Rows beside destila's in the same sweep (the peers' losses, from ``benchmarks/peers``), measured alike.

    ``names`` are the rows' ``impl`` values; ``worker`` is the ``"module:function"`` that
    :func:`run_isolated` calls with the keyword arguments of :meth:`configure`.
    """

    names: tuple[str, ...]
    worker: str

    def configure(self, name: str, n: int, cfg: LossBenchConfig) -> tuple[dict, dict | None, str | None]:
        """``(row fields, worker kwargs or None, why it cannot run or None)`` for row ``name`` at ``n`` rows."""

    def columns(self, impl: str) -> dict:
        """The descriptive columns of destila's own row ``impl`` (or ``floor``) in such a sweep."""


def input_bytes(n: int, cfg: LossBenchConfig) -> int:
    """Inputs and their gradients, O(N·(H+K)) + O(V·H): hidden, dh, weight, dW, ids, log-probs, tail."""
    e = DTYPE_BYTES[cfg.dtype]
    return 2 * n * cfg.hidden * e + 2 * cfg.vocab * cfg.hidden * e + n * cfg.top_k * (4 + 2) + n * 4


def most_chunk_rows(n: int, cfg: LossBenchConfig) -> int:
    """The most rows per chunk a run at ``n`` rows of ``cfg`` can use: ``chunk_size``, or the loss's own choice
    before free memory lowers it (:func:`~destila.losses.plan.auto_chunk_rows` with no memory limit), so that a
    prediction made from it is never too small and never needs the device itself."""
    if cfg.chunk_size is not None:
        return min(cfg.chunk_size, n)
    return auto_chunk_rows(n, cfg.vocab, cfg.hidden, torch.device(cfg.device.split(":")[0]), free=1 << 62)


def predicted_bytes(impl: str, n: int, cfg: LossBenchConfig) -> int:
    """A generous estimate of a configuration's peak above baseline, to skip what cannot fit."""
    e, v, h, k = DTYPE_BYTES[cfg.dtype], cfg.vocab, cfg.hidden, cfg.top_k
    chunk = most_chunk_rows(n, cfg)
    base = input_bytes(n, cfg) + n * k * (8 + 4 + 1) * 2  # + cleaned targets (int64 ids, log-probs, masks)
    float32_head = 0 if e == 4 else 2 * v * h * 4  # float32 copy of W and dW accumulator
    if impl in ("fused", "fused-exact", "fused-torch", "floor"):
        return base + chunk * v * 4 + float32_head
    if impl == "chunked":
        return base + 2 * n * v * e + chunk * v * 4
    return base + int(DENSE_GRIDS * n * v * 4)


def loss_worker(impl: str, seq_len: int, hidden: int, vocab: int, top_k: int, dtype: str, device: str,
                chunk_size: int | None, repeats: int, max_seconds: float, seed: int = 0) -> dict:
    """One configuration, run inside :func:`run_isolated`: see :func:`time_against_floor`.

    ``chunk_size`` None: the loss's own choice for all ``seq_len`` rows, decided
    once here and used by every run and by the floor; the result says which
    rows per chunk and which path (:func:`destila.losses.describe_path`) ran.
    """
    h, w, ids, lp, tail = make_loss_inputs(seq_len, hidden, vocab, top_k, getattr(torch, dtype), device, seed)
    options = {"impl": impl, **IMPL_OPTIONS.get(impl, {})} if impl != "floor" else {"impl": "fused"}
    plan = plan_for(LossOptions(**options, chunk_size=chunk_size), h.detach(), w.detach(), None)
    chunk = plan.chunk

    def loss(rows: int) -> None:
        distill_loss(h[:rows], w, ids[:rows], lp[:rows], tail[:rows], **options, chunk_size=chunk).backward()

    result = time_against_floor(loss, h, w, seq_len=seq_len, chunk_size=chunk, repeats=repeats,
                                max_seconds=max_seconds, device=device, floor_only=impl == "floor")
    return {**result, "chunk_size": chunk, "path": "the lm_head GEMMs" if impl == "floor" else plan.describe()}


def fused_chunk_rows(h, w, chunk_size: int | None) -> int:
    """Rows per chunk of the fused loss on ``h [N, H]`` and ``w [V, H]``: ``chunk_size``, or the loss's own
    choice when it is None. A peer's row and its floor use the same, so that every row of an N is chunked alike."""
    return plan_for(LossOptions(impl="fused", chunk_size=chunk_size), h.detach(), w.detach(), None).chunk


def run_loss_sweep(cfg: LossBenchConfig, on_row=None, others: OtherRows | None = None) -> list[dict]:
    """Every (N, impl) configuration plus the floor, each in its own process. Rows as JSON-able dicts.

    ``others``: further rows per N after destila's (see :class:`OtherRows`).

    ``floor_seconds`` of an impl's row is the floor timed in that impl's own
    process, interleaved with its runs; ``sweep_floor_seconds`` is the floor
    row's own time (a separate process, at another moment).
    """
    rows: list[dict] = []
    failed_at: dict[str, int] = {}
    for n in cfg.seq_lens:
        group = []
        for impl in ("floor", *cfg.impls, *(others.names if others else ())):
            row = _run_one(impl, n, cfg, failed_at, others)
            if row["status"] == "oom":
                failed_at.setdefault(impl, n)
            group.append(row)
        sweep_floor = group[0]["seconds"] if group[0]["status"] == "ok" else None
        for row in group:
            row["sweep_floor_seconds"] = sweep_floor
            ok = row["seconds"] and row["floor_seconds"]
            row["ratio_to_floor"] = row["seconds"] / row["floor_seconds"] if ok else None
            rows.append(row)
            if on_row is not None:
                on_row(row)
    return rows


def _run_one(impl: str, n: int, cfg: LossBenchConfig, failed_at: dict, others: OtherRows | None) -> dict:
    other = others is not None and impl in others.names
    row = {"impl": impl, "seq_len": n, "hidden": cfg.hidden, "vocab": cfg.vocab, "top_k": cfg.top_k,
           "dtype": cfg.dtype, "device": cfg.device, "chunk_size": cfg.chunk_size, "status": None,
           "peak_bytes": None, "seconds": None, "times": None, "repeats_done": 0, "floor_seconds": None,
           "floor_times": None, "predicted_bytes": None if other else predicted_bytes(impl, n, cfg),
           "input_bytes": input_bytes(n, cfg), "error": None, **cfg.extra}
    worker, kwargs = WORKER, None
    if other:
        fields, kwargs, reason = others.configure(impl, n, cfg)
        row.update(fields)
        if reason:
            return {**row, "status": "unavailable", "error": reason}
        worker = others.worker
    elif others is not None:  # the columns that say what each row needs and computes
        row.update(others.columns(impl))
    if impl in failed_at:
        return {**row, "status": "skipped", "error": f"oom at seq_len={failed_at[impl]}"}
    if cfg.memory_budget is not None and row["predicted_bytes"] > cfg.memory_budget:
        return {**row, "status": "skipped", "error": f"predicted {row['predicted_bytes'] / 2**30:.1f} GiB > "
                                                     f"budget {cfg.memory_budget / 2**30:.1f} GiB"}
    if kwargs is None:
        kwargs = dict(impl=impl, seq_len=n, hidden=cfg.hidden, vocab=cfg.vocab, top_k=cfg.top_k, dtype=cfg.dtype,
                      device=cfg.device, chunk_size=cfg.chunk_size, repeats=cfg.repeats,
                      max_seconds=cfg.max_seconds, seed=cfg.seed)
    report = run_isolated(worker, kwargs, device=cfg.device, timeout=cfg.timeout, memory_limit=cfg.memory_budget,
                          threads=cfg.threads)
    result = report["result"] or {}
    return {**row, "status": report["status"], "peak_bytes": report["peak_bytes"], "error": report["error"],
            "seconds": result.get("seconds"), "times": result.get("times"),
            "floor_seconds": result.get("floor_seconds"), "floor_times": result.get("floor_times"),
            "repeats_done": result.get("repeats_done", 0), "threads": result.get("threads"),
            "gpu": result.get("gpu"), "wall_seconds": report["wall_seconds"],
            "chunk_size": result.get("chunk_size", cfg.chunk_size), "path": result.get("path")}


def summarise(rows: list[dict]) -> list[str]:
    """The claims, as lines: fused vs floor (timed in fused's process) and vs dense (time), dense vs fused
    (memory), fused's growth in N."""
    ok = {(r["impl"], r["seq_len"]): r for r in rows if r["status"] == "ok"}
    lines = []
    for n in sorted({r["seq_len"] for r in rows}):
        fused, dense = ok.get(("fused", n)), ok.get(("dense", n))
        parts = [f"N={n}:"]
        if fused and fused.get("ratio_to_floor"):
            parts.append(f"fused/floor time {fused['ratio_to_floor']:.3f}")
        if fused and dense:
            parts.append(f"fused/dense time {fused['seconds'] / dense['seconds']:.3f}")
            parts.append(f"dense/fused memory {dense['peak_bytes'] / fused['peak_bytes']:.1f}")
        if len(parts) > 1:
            lines.append("  ".join(parts))
    fused_ns = sorted(n for (impl, n) in ok if impl == "fused")
    starts = sorted({fused_ns[0], 4096} & set(fused_ns[:-1])) if len(fused_ns) >= 2 else []
    for first in starts:  # the acceptance criterion is stated from 4K
        lo, hi = ok[("fused", first)], ok[("fused", fused_ns[-1])]
        grew, inputs = hi["peak_bytes"] - lo["peak_bytes"], hi["input_bytes"] - lo["input_bytes"]
        per_nv = (hi["seq_len"] - lo["seq_len"]) * lo["vocab"] * 4
        lines.append(f"fused peak {first}→{fused_ns[-1]}: +{grew / 2**20:.1f} MiB; inputs+grads grow "
                     f"+{inputs / 2**20:.1f} MiB; one float32 N·V array would add {per_nv / 2**20:.0f} MiB")
    return lines


def default_memory_budget(device: str) -> int | None:
    """What ``destila bench loss`` allows a configuration when no budget is given: 60% of the memory available
    now on CPU (so a sweep never pushes the machine into swap); none on CUDA (the card's own limit applies)."""
    # psutil: only to size the default budget on CPU
    import psutil

    return None if device.startswith("cuda") else int(0.6 * psutil.virtual_memory().available)
