"""How a call of the loss will run: GEMM precision, row-math kernels and chunk rows, decided once per call.

:class:`LossOptions` says what the caller asked for (``"auto"`` or a name);
:func:`plan_for` turns that into what runs on these tensors, or refuses with
one line when a named choice cannot run here (never a quiet fallback):

- ``precision``: ``fast`` (CUDA, bf16 inputs: bf16 GEMMs writing float32
  logits, G rounded to bf16, dW summed in float32; on CPU the same numerics
  are emulated with float32 GEMMs) or ``exact`` (float32 GEMMs on a float32
  copy of the head; the only choice for float32 / float64 inputs);
- ``kernels``: ``triton`` (:mod:`destila.losses.row_kernels`) or ``torch``;
- ``chunk_size``: the caller's, or :func:`auto_chunk_rows`.

The path taken is logged once per process and per distinct path
(``logging.getLogger("destila.losses")``, INFO) and returned by
:func:`describe_path` for a caller that wants it in its own report.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass

import torch
from torch import Tensor

from destila.losses.options import LossOptions
from destila.losses.row_kernels import interpreting, triton_missing

log = logging.getLogger("destila.losses")

# The [chunk, V] float32 buffer beyond which more rows per chunk stopped paying
# (docs/loss.md, "chunk size": the measured curves). CUDA: the three GEMMs of a
# chunk are compute-bound from about 1–2K rows at V = 128K (the float32 dW
# update is read and written once per chunk); CPU: flat from 1K to 4K rows at V = 32K.
TARGET_BUFFER_BYTES = {"cuda": 1 << 30, "cpu": 256 << 20}
# Never more than this share of the free memory for the buffer (the rest: activations, optimizer, caches).
FREE_MEMORY_SHARE = 0.25
MIN_AUTO_ROWS = 64


@dataclass(frozen=True)
class Plan:
    """What one call runs: ``precision`` (fast / exact; None for dense), ``kernels`` (triton / torch),
    ``chunk`` rows, and whether fast numerics are ``emulated`` with float32 GEMMs (CPU)."""

    impl: str
    precision: str | None
    kernels: str
    chunk: int
    emulated: bool = False
    rounded: bool = False  # fast on float32 inputs: rounded to bf16 for the GEMMs, as autocast does

    def describe(self) -> str:
        if self.impl == "dense":
            return "dense: full [N, V] grids through autograd"
        parts = [self.impl]
        if self.precision == "fast":
            parts.append("precision fast (bf16 GEMMs, float32 logits and dW, bf16 G"
                         + (", float32 inputs rounded to bf16" if self.rounded else "")
                         + (", emulated with float32 GEMMs on CPU)" if self.emulated else ")"))
        elif self.precision == "exact":
            parts.append("precision exact (float32 GEMMs)")
        parts.append(f"row math {self.kernels}")
        parts.append(f"chunk {self.chunk} rows")
        return ", ".join(parts)


def plan_for(options: LossOptions, hidden: Tensor, weight: Tensor, bias: Tensor | None) -> Plan:
    """The :class:`Plan` of a call with these (already checked) 2-D ``hidden [N, H]`` and ``weight [V, H]``.

    Raises ``ValueError`` when ``precision`` or ``kernels`` names a path that
    cannot run on these tensors here.
    """
    rows, size = hidden.shape
    vocab = weight.shape[0]
    if options.impl == "dense":
        plan = Plan("dense", None, "torch", rows)
    else:
        precision, emulated = _precision(options, hidden, weight, bias) if options.impl == "fused" else (None, False)
        kernels = _kernels(options, hidden.device)
        copies = 2 if precision == "exact" and weight.dtype != torch.float32 else 1
        chunk = options.chunk_size or _auto_chunk_once(rows, vocab, size, hidden.device, copies)
        rounded = precision == "fast" and any(t is not None and t.dtype == torch.float32 for t in (hidden, weight, bias))
        plan = Plan(options.impl, precision, kernels, max(1, min(chunk, rows)), emulated, rounded)
    _log_once(plan.describe())
    return plan


def describe_path(options: LossOptions, hidden: Tensor, weight: Tensor, bias: Tensor | None = None) -> str:
    """One line saying how :func:`destila.distill_loss` with ``options`` runs on these tensors.

    >>> describe_path(LossOptions(), hidden_bf16_cuda, weight_bf16_cuda)
    'fused, precision fast (bf16 GEMMs, float32 logits and dW, bf16 G), row math triton, chunk 2048 rows'
    """
    return plan_for(options, hidden.reshape(-1, hidden.shape[-1]), weight, bias).describe()


def _precision(options: LossOptions, hidden: Tensor, weight: Tensor, bias: Tensor | None) -> tuple[str, bool]:
    tensors = [t for t in (hidden, weight, bias) if t is not None]
    all_bf16 = all(t.dtype == torch.bfloat16 for t in tensors)
    cuda = hidden.device.type == "cuda"
    if options.precision == "exact":
        return "exact", False
    if options.precision == "fast":
        # float32 inputs (mixed-precision training keeps float32 master weights) are rounded to bf16 for
        # the GEMMs, as autocast would round them for a plain lm_head.
        if not all(t.dtype in (torch.bfloat16, torch.float32) for t in tensors):
            found = sorted({str(t.dtype).removeprefix("torch.") for t in tensors})
            raise ValueError(f"precision: 'fast' expects bfloat16 or float32 hidden, weight and bias, found "
                             f"{', '.join(found)}; use precision='exact' (or 'auto') for other dtypes")
        if cuda and not bf16_gemm_to_float32(hidden.device):
            raise ValueError(f"precision: 'fast' needs torch.mm(..., out_dtype=torch.float32) on CUDA, which "
                             f"torch {torch.__version__} lacks here; use precision='exact' or a newer torch")
        return "fast", not cuda
    if cuda and all_bf16 and bf16_gemm_to_float32(hidden.device):
        return "fast", False
    return "exact", False


def _kernels(options: LossOptions, device: torch.device) -> str:
    missing = triton_missing()
    if options.kernels == "torch":
        return "torch"
    if options.kernels == "triton":
        if missing:
            raise ValueError(f"kernels: 'triton' asked for, but {missing}; use kernels='auto' or 'torch'")
        if device.type != "cuda" and not interpreting():
            raise ValueError(f"kernels: 'triton' runs on CUDA tensors (on CPU only under TRITON_INTERPRET=1, "
                             f"Triton's interpreter for tests), found tensors on {device}; use kernels='auto' "
                             f"or 'torch'")
        return "triton"
    return "triton" if device.type == "cuda" and not missing else "torch"


@functools.cache
def bf16_gemm_to_float32(device: torch.device) -> bool:
    """Whether this torch runs a bf16 × bf16 GEMM writing float32 on ``device`` (``mm`` and ``addmm``'s
    ``out_dtype``), probed once per device on a tiny product, in each form the fast path calls: ``mm``;
    ``addmm`` scaled by alpha over its own ignored output (beta 0); ``addmm`` summing into a float32 ``out``."""
    try:
        a = torch.ones(2, 2, dtype=torch.bfloat16, device=device)
        out = torch.full((2, 2), float("nan"), dtype=torch.float32, device=device)
        torch.mm(a, a.t(), out_dtype=torch.float32, out=out)  # 2
        torch.addmm(out, a, a.t(), beta=0.0, alpha=0.5, out_dtype=torch.float32, out=out)  # 1
        torch.addmm(out, a.t(), a, out_dtype=torch.float32, out=out)  # 1 + 2
        return bool((out == 3).all())
    except (TypeError, RuntimeError, NotImplementedError):
        return False


def free_memory(device: torch.device) -> int:
    """Bytes free now: the CUDA device's (``mem_get_info``), or the host's available memory."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    import psutil  # a runtime dependency; only needed when the chunk is chosen

    return psutil.virtual_memory().available


def auto_chunk_rows(rows: int, vocab: int, hidden_size: int, device: torch.device, *, head_copies: int = 1,
                    free: int | None = None) -> int:
    """Rows per chunk when ``chunk_size`` is None: a power of two, at most ``rows``.

    The ``[chunk, V]`` float32 buffer is sized to the device's target
    (:data:`TARGET_BUFFER_BYTES`: where the measured time stopped falling),
    and to at most :data:`FREE_MEMORY_SHARE` of the memory still free once
    the float32 head arrays the call makes are counted (``head_copies × V·H``
    floats: the dW accumulator, plus the float32 copy of a half-precision
    head on the exact path). Naive equivalent::

        budget = min(TARGET[device], 0.25 * (free - head_copies * V * H * 4))
        chunk  = min(rows, max(64, 2 ** floor(log2(budget / (4 * V)))))
    """
    free = free_memory(device) if free is None else free
    budget = min(TARGET_BUFFER_BYTES.get(device.type, TARGET_BUFFER_BYTES["cpu"]),
                 FREE_MEMORY_SHARE * max(0, free - head_copies * vocab * hidden_size * 4))
    fitting = int(budget // (4 * max(vocab, 1)))
    chunk = MIN_AUTO_ROWS
    while chunk * 2 <= fitting:
        chunk *= 2
    return max(1, min(rows, chunk))


@functools.lru_cache(maxsize=64)
def _auto_chunk_once(rows: int, vocab: int, hidden_size: int, device: torch.device, head_copies: int) -> int:
    """:func:`auto_chunk_rows`, decided once per shape in a process, so that repeated calls (training steps)
    chunk alike and give the same sums."""
    return auto_chunk_rows(rows, vocab, hidden_size, device, head_copies=head_copies)


_LOGGED: set[str] = set()


def _log_once(text: str) -> None:
    if text not in _LOGGED:
        _LOGGED.add(text)
        log.info("distill_loss: %s", text)
