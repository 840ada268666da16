"""Are a model's weights (or gradients) all finite? One pass over the tensors, one host sync per device.

A model saved after a diverged run holds NaN or infinite weights; evaluated,
it prints NaN perplexities, and distilled from, it trains nothing. Every
command that loads a model asks :func:`check_finite_weights` first, and
training asks :func:`all_finite` of its gradients and weights.

A tensor's sum is finite only if every element is (NaN and ±inf propagate),
so one reduction per tensor and one ``.item()`` per device say "all finite";
only a non-finite sum (or a finite tensor whose sum overflows float32, which
weights do not) is looked at element by element.

Naive equivalent: ``all(torch.isfinite(p).all() for p in model.parameters())``,
which syncs once per tensor and allocates a boolean copy of each.
"""

from __future__ import annotations

import torch


def _local(tensor):
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor  # a DTensor's shard on this process


def _checkable(tensor) -> bool:
    return tensor is not None and tensor.is_floating_point() and tensor.device.type != "meta" and tensor.numel() > 0


def all_finite(tensors) -> bool:
    """True when every element of every floating-point tensor of ``tensors`` is finite (meta tensors skipped)."""
    sums: dict = {}
    for tensor in tensors:
        if _checkable(tensor):
            local = _local(tensor)
            sums.setdefault(local.device, []).append(local.sum(dtype=torch.float32))
    return all(bool(torch.isfinite(torch.stack(values)).all()) for values in sums.values())


def nonfinite_tensors(named) -> list[tuple[str, int]]:
    """``(name, count of NaN/±inf elements)`` for each tensor of ``named`` (``(name, tensor)`` pairs) that has any."""
    named = [(name, _local(t)) for name, t in named if _checkable(t)]
    if all_finite(t for _, t in named):
        return []
    found = []
    for name, tensor in named:
        if not bool(torch.isfinite(tensor.sum(dtype=torch.float32))):
            count = int((~torch.isfinite(tensor)).sum())
            if count:
                found.append((name, count))
    return found


def describe_nonfinite(found: list[tuple[str, int]]) -> str:
    """``"12 NaN or infinite values in model.norm.weight (and 3 more tensors)"``."""
    name, count = found[0]
    more = f" (and {len(found) - 1} more tensor{'s' if len(found) > 2 else ''})" if len(found) > 1 else ""
    return f"{count} NaN or infinite value{'s' if count > 1 else ''} in {name}{more}"


def check_finite_weights(model, where: str) -> None:
    """Raise ``ValueError`` when ``model``'s parameters hold NaN or infinite values; ``where`` names it."""
    found = nonfinite_tensors(model.named_parameters())
    if found:
        raise ValueError(
            f"model: {where} holds non-finite weights ({describe_nonfinite(found)}); it is damaged or was saved "
            "from a training run that diverged: use an intact copy"
        )
