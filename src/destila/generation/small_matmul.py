"""Linear layers of a few rows on the CPU: the faster of two ways to take the same product, timed per shape.

While a model decodes, every linear layer multiplies a handful of rows
``x [m, in]`` (one token, or the ``k + 1`` tokens that verify ``k`` proposals)
by its weight ``W [out, in]``. torch takes ``x @ W.T``; with some CPU BLAS
builds that product of 2 to 16 rows costs several times one row's for a large
weight (MKL on AMD EPYC: 24 ms for 2 rows of SmolLM2's 49,152 × 576 output
head against 9.5 ms for one), while the same numbers taken as
``(W @ x.T).T``, "weight-major", cost 3 ms for 2 rows, and one row padded
with a zero row to two (a two-column product instead of a matrix-vector one)
costs 3 ms too. Which way is faster depends on the BLAS, the CPU, the shape
and ``m``, so nothing is assumed: the first time a layer of shape
``(out, in)`` meets ``m`` rows of a dtype, both ways are timed and the faster
one is kept for that key. Each timing takes the product with every weight of
that shape in the models (up to 256 MiB of them), one after another, as a
forward reads them (the best of a few sweeps, each after the caches are
emptied): one weight timed alone misjudges small shapes (for SmolLM2's
576 × 576 projections, torch's one-row product wins alone and loses by 0.04
ms a layer in a sweep of 60). Results agree to float rounding (the tests
hold both to a float64 product).

Naive equivalent of every choice::

    y = torch.nn.functional.linear(x, W, b)

Used through :func:`small_matmul`, a context in which the given models'
``nn.Linear`` layers (and a draft's narrow head) take their products this way;
outside it, and for gradients, non-CPU tensors, weights of a tensor subclass
(quantized ones) or more than ``MAX_ROWS`` rows, torch's own ``linear`` runs
unchanged.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from functools import partial

import torch
import torch.nn.functional as F

MAX_ROWS = 32
"""Products of more rows (a prompt's prefill, a batch) are left to torch: they are not decoding steps."""
_TIMINGS = 5
WAYS = ("torch", "weight_major")


def weight_major_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``F.linear(x, weight, bias)`` taken as ``(weight @ x.T).T``: ``x [..., in]``, ``weight [out, in]`` →
    ``[..., out]``; one row is padded with a zero row (a two-column product, not a matrix-vector one)."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] == 1:
        product = (weight @ torch.cat([rows, rows.new_zeros(rows.shape)]).T)[:, :1]
    else:
        product = weight @ rows.T
    out = product.T.contiguous()
    if bias is not None:
        out += bias
    return out.reshape(*x.shape[:-1], weight.shape[0])


def _linear(way: str):
    return F.linear if way == "torch" else weight_major_linear


_EVICT_BYTES = 64 << 20
# A timing sweeps the layers of a shape until this many bytes of weights are read: enough for a run of products
# as a forward has (SmolLM2's 60 projections of 576 × 576 are 80 MiB), bounded for a large model's.
_SWEEP_BYTES = 256 << 20
_evict_buffer: list[torch.Tensor] = []


def _evict_caches() -> None:
    """Read 64 MiB (twice a 32 MiB L3) so that the next product finds its weight in memory, not in a cache."""
    if not _evict_buffer:
        _evict_buffer.append(torch.ones(_EVICT_BYTES // 4))
    _evict_buffer[0].sum()


def _sweep(layers: list[tuple[torch.Tensor, torch.Tensor | None]]) -> list:
    """The leading ``layers`` whose weights add up to at most ``_SWEEP_BYTES`` (at least one layer)."""
    taken, read = [], 0
    for weight, bias in layers:
        if taken and read + weight.nbytes > _SWEEP_BYTES:
            break
        taken.append((weight, bias))
        read += weight.nbytes
    return taken


def _fastest(x: torch.Tensor, layers: list[tuple[torch.Tensor, torch.Tensor | None]]) -> str:
    """The way of :data:`WAYS` whose best of ``_TIMINGS`` sweeps is shortest; a sweep takes ``x`` through the
    ``(weight, bias)`` of ``layers`` (the weights of one shape; up to ``_SWEEP_BYTES`` of them), after the caches
    are evicted.

    In a model's forward every weight arrives from memory, so a product timed on a weight left warm in the cache
    by the call before would be judged on a cost it never has there (torch's one-row product of a 1536 × 576
    weight: 0.07 ms warm, about three times that cold); and one weight timed alone, even cold, is judged on a
    cost that a run of them does not have. The ways are swept in turn, so a load that comes and goes falls on
    both, and the best sweep is the one least disturbed by it."""
    best, layers = dict.fromkeys(WAYS, float("inf")), _sweep(layers)
    for round_ in range(_TIMINGS + 1):
        for way in WAYS:
            product = _linear(way)
            _evict_caches()
            start = time.perf_counter()
            for weight, bias in layers:
                product(x, weight, bias)
            if round_:  # round 0 pays one-time costs
                best[way] = min(best[way], time.perf_counter() - start)
    return min(WAYS, key=best.__getitem__)


class TimedLinear:
    """``linear(x, weight, bias)`` that takes, per ``(out, in, rows, dtype)``, the faster way of :data:`WAYS`.

    ``choices`` maps each key met so far to the way chosen; ``way`` fixes one way for every key instead of
    timing (``"torch"``: torch's own ``linear`` throughout). ``layers`` holds, per ``(out, in, dtype)``, the
    ``(weight, bias)`` of every layer of that shape in the models of the open :func:`small_matmul` contexts: a key
    is timed over all of them (a weight met without a layer there is timed alone).
    """

    def __init__(self, way: str | None = None):
        if way is not None and way not in WAYS:
            raise ValueError(f"small matmul: expected a way of {', '.join(WAYS)} or None (timed), found {way!r}")
        self.way = way
        self.choices: dict[tuple, str] = {}
        self.layers: dict[tuple, list[tuple[torch.Tensor, torch.Tensor | None]]] = {}
        self.wrapped_layers = 0  # linear layers left alone because something else already wraps their forward

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        rows = x.numel() // max(x.shape[-1], 1)
        if (rows == 0 or rows > MAX_ROWS or x.device.type != "cpu"
                or type(weight.data) is not torch.Tensor  # quantized or otherwise wrapped weights: their own linear
                or (torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad))):
            return F.linear(x, weight, bias)
        key = (weight.shape[0], weight.shape[1], rows, x.dtype)
        way = self.choices.get(key)
        if way is None:
            layers = self.layers.get((weight.shape[0], weight.shape[1], weight.dtype)) or [(weight, bias)]
            way = self.way or _fastest(x.reshape(rows, -1), layers)
            self.choices[key] = way
        return _linear(way)(x, weight, bias)

    def summary(self) -> dict:
        """``{"torch": n, "weight_major": n}``: how many (shape, rows, dtype) keys took each way."""
        return {way: sum(1 for chosen in self.choices.values() if chosen == way) for way in WAYS}

    def listing(self) -> dict:
        """``{"OUTxIN, M rows, DTYPE": way}`` for every key met, for a report."""
        return {f"{out}x{inputs}, {rows} rows, {str(dtype).removeprefix('torch.')}": way
                for (out, inputs, rows, dtype), way in sorted(self.choices.items(), key=str)}


def _linear_forward(module: torch.nn.Linear, linear: TimedLinear, x: torch.Tensor) -> torch.Tensor:
    return linear(x, module.weight, module.bias)


@contextmanager
def small_matmul(*models, way: str | None = None, linear: TimedLinear | None = None):
    """Within the block, every ``nn.Linear`` of ``models`` (and any module that declares
    ``swappable_linear = True`` and takes its product through its ``linear`` attribute, as a draft's narrow head
    does) computes through one :class:`TimedLinear`, which it yields; a layer whose ``forward`` something else
    already replaced keeps it and is counted in ``wrapped_layers``.

    ``way`` ``None`` times both ways per shape; ``"torch"`` or ``"weight_major"`` fixes one. ``linear``, a
    :class:`TimedLinear` used before, keeps its choices instead (measurements that compare against one
    baseline take its products the same way every time). The layers are restored on exit, also on an error.
    """
    linear = linear if linear is not None else TimedLinear(way)
    patched, hooked, seen = [], [], set()
    for model in models:
        for module in model.modules():
            if id(module) in seen:  # a module shared by two of the models is swapped once
                continue
            seen.add(id(module))
            if isinstance(module, torch.nn.Linear):
                if "forward" in module.__dict__:  # e.g. accelerate's offload hooks: theirs runs, counted
                    linear.wrapped_layers += 1
                    continue
                module.forward = partial(_linear_forward, module, linear)
                patched.append(module)
                key = (*module.weight.shape, module.weight.dtype)  # what a timing sweeps: every layer of it
                linear.layers.setdefault(key, []).append((module.weight, module.bias))
            elif getattr(module, "swappable_linear", False):
                hooked.append((module, module.__dict__.get("linear")))
                module.linear = linear
    try:
        yield linear
    finally:
        for module in patched:
            del module.forward
            # Only the open contexts' layers are timed; a TimedLinear kept for later holds no weights alive.
            key = (*module.weight.shape, module.weight.dtype)
            linear.layers[key] = [pair for pair in linear.layers[key] if pair[0] is not module.weight]
            if not linear.layers[key]:
                del linear.layers[key]
        for module, own in hooked:
            if own is None:
                del module.linear  # back to the class's
            else:
                module.linear = own
