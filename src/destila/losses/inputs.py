"""Checking the loss's tensors and putting the teacher's side in one canonical form.

Every implementation starts from a :class:`Targets`: the teacher's top-K as
int64 ids, a mask of the entries that count, log-probs in the compute dtype,
the rest-bucket log-mass, the labels and the row mask. Padded top-K entries
(log-prob ``-inf``, any id) and rows whose label is ``ignore_index`` are
folded into the masks here, so the maths downstream never sees them:

    valid[r, k] = keep[r] and topk_logprobs[r, k] > -inf
    ids[r, k]   = topk_ids[r, k] if valid[r, k] else 0
    keep[r]     = labels is None or labels[r] != ignore_index

Values are checked only where they are used (kept rows, valid entries), so a
cache may hold anything at padding positions. The cleaned form is built per
row range (:meth:`Batch.targets`): the fused loss holds it for one chunk at a
time, so its memory beyond the caller's tensors is O(chunk·K), not O(N·K). Student tensors are not
scanned for NaN: a diverged student shows up as a NaN loss, as with any loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from destila.losses.options import LossOptions

# Log-probs come from a float16/bfloat16 cache; rounding can push a log-prob
# of ~0 a hair above 0 and a sum of top-K probabilities a hair above 1.
_LOGPROB_SLACK = 1e-3
_MASS_SLACK = 1e-2


@dataclass
class Targets:
    """The teacher's side of a batch of N rows, cleaned (see the module docstring).

    ids ``[N, K]`` int64, valid ``[N, K]`` bool, logprobs ``[N, K]`` (``-inf``
    where not valid), tail_logmass ``[N]`` (log of the teacher's mass outside
    its top-K; ``-inf`` where there is no rest bucket), has_rest ``[N]`` bool
    (``tail="bucket"``, row kept, and some vocabulary left outside the top-K),
    labels ``[N]`` int64 (0 where ignored) or None, keep ``[N]`` bool.
    """

    ids: Tensor
    valid: Tensor
    logprobs: Tensor
    tail_logmass: Tensor
    has_rest: Tensor
    labels: Tensor | None
    keep: Tensor


@dataclass
class Batch:
    """A checked call: 2-D hidden ``[N, H]``, the head, the raw teacher tensors and the normaliser ``n`` (≥ 1).

    The teacher's tensors stay as the caller passed them (flattened views);
    :meth:`targets` cleans any row range on demand, so the fused loss never
    holds a cleaned copy of all N rows at once.
    """

    hidden: Tensor
    weight: Tensor
    bias: Tensor | None
    topk_ids: Tensor        # [N, K], caller's int dtype
    topk_logprobs: Tensor   # [N, K], caller's float dtype
    tail_logmass: Tensor | None
    labels: Tensor | None   # [N], caller's int dtype
    keep: Tensor            # [N] bool
    n: Tensor
    compute_dtype: torch.dtype
    tail: str               # the tail option

    @property
    def rows(self) -> int:
        return self.hidden.shape[0]

    def targets(self, start: int = 0, stop: int | None = None) -> Targets:
        """The cleaned :class:`Targets` of rows ``start:stop`` (see the module docstring)."""
        stop = self.rows if stop is None else stop
        keep = self.keep[start:stop]
        logprobs = self.topk_logprobs[start:stop].to(self.compute_dtype)
        valid = keep[:, None] & (logprobs > float("-inf"))
        logprobs = logprobs.masked_fill(~valid, float("-inf"))
        # Out of place: ``.long()`` returns the caller's own tensor when it is already int64.
        ids = self.topk_ids[start:stop].long().masked_fill(~valid, 0)
        if self.tail_logmass is None:
            tail = derive_tail_logmass(logprobs)
        else:
            tail = self.tail_logmass[start:stop].to(self.compute_dtype)
        # With every token among the teacher's top-K the rest bucket is empty:
        # its mass is 0 for both sides, whatever a cache rounded it to.
        has_rest = keep & (valid.sum(dim=1) < self.weight.shape[0]) & (self.tail == "bucket")
        tail = tail.masked_fill(~has_rest, float("-inf"))
        labels = None
        if self.labels is not None:
            labels = self.labels[start:stop].long().masked_fill(~keep, 0)
        return Targets(ids, valid, logprobs, tail, has_rest, labels, keep)


def _shape(t: Tensor) -> str:
    return "[" + ", ".join(map(str, t.shape)) + "]"


def _require_tensor(name: str, t, *, floating: bool) -> None:
    wanted = "a floating-point tensor" if floating else "an integer tensor"
    if not isinstance(t, Tensor):
        raise ValueError(f"{name}: expected {wanted}, found {type(t).__name__}")
    ok = t.dtype.is_floating_point if floating else not (t.dtype.is_floating_point or t.dtype.is_complex
                                                          or t.dtype == torch.bool)
    if not ok:
        raise ValueError(f"{name}: expected {wanted}, found dtype {t.dtype}")


def _require_shape(name: str, t: Tensor, expected: tuple, meaning: str) -> None:
    if tuple(t.shape) != tuple(expected):
        want = "[" + ", ".join(map(str, expected)) + "]"
        raise ValueError(f"{name}: expected shape {want} ({meaning}), found {_shape(t)}")


def compute_dtype_of(*tensors: Tensor | None) -> torch.dtype:
    """float64 if any input is float64 (the oracle tests), else float32: never accumulate below float32."""
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def promoted_dtype(*tensors: Tensor | None) -> torch.dtype:
    """The dtype a plain ``F.linear`` of mixed-precision head inputs runs in (e.g. bf16 hidden, fp32 weight)."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        if t is not None:
            dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def derive_tail_logmass(logprobs: Tensor) -> Tensor:
    """``log(1 − Σ_k e^{ℓ_k})`` from the top-K log-probs ``[N, K]`` alone (``-inf`` entries are padding).

    Less accurate than the cached value: the cache computes the rest mass in
    float32 from the teacher's full logsumexp, while this subtracts rounded
    (often float16) probabilities from 1. A sum that rounds to ≥ 1 gives ``-inf``.
    """
    head = torch.logsumexp(logprobs, dim=-1).clamp(max=0.0)
    return torch.log(-torch.expm1(head))


def check_and_prepare(hidden, weight, topk_ids, topk_logprobs, tail_logmass, labels, bias, num_items,
                      options: LossOptions) -> Batch:
    """Validate a call of :func:`destila.distill_loss` and return its :class:`Batch`.

    Raises ``ValueError`` naming the argument, what was expected and what was found.
    """
    _require_tensor("hidden", hidden, floating=True)
    _require_tensor("weight", weight, floating=True)
    _require_tensor("topk_ids", topk_ids, floating=False)
    _require_tensor("topk_logprobs", topk_logprobs, floating=True)
    if hidden.dim() not in (2, 3):
        raise ValueError(f"hidden: expected [N, H] or [B, T, H], found {_shape(hidden)}")
    lead, size = tuple(hidden.shape[:-1]), hidden.shape[-1]
    lead_text = "N" if len(lead) == 1 else "B, T"
    if weight.dim() != 2 or weight.shape[1] != size:
        raise ValueError(f"weight: expected [V, H] with H = {size} (hidden's last dim), found {_shape(weight)}")
    vocab = weight.shape[0]
    if bias is not None:
        _require_tensor("bias", bias, floating=True)
        _require_shape("bias", bias, (vocab,), "[V], V = weight.shape[0]")
    if topk_ids.dim() != len(lead) + 1 or tuple(topk_ids.shape[:-1]) != lead:
        raise ValueError(f"topk_ids: expected [{lead_text}, K] with [{lead_text}] = "
                         f"{list(lead)} from hidden {_shape(hidden)}, found {_shape(topk_ids)}")
    top_k = topk_ids.shape[-1]
    if not 1 <= top_k <= vocab:
        raise ValueError(f"topk_ids: expected 1 ≤ K ≤ V = {vocab}, found K = {top_k}")
    _require_shape("topk_logprobs", topk_logprobs, tuple(topk_ids.shape), "same as topk_ids")
    if tail_logmass is not None:
        _require_tensor("tail_logmass", tail_logmass, floating=True)
        _require_shape("tail_logmass", tail_logmass, lead, f"[{lead_text}] like hidden without H")
    if labels is not None:
        _require_tensor("labels", labels, floating=False)
        _require_shape("labels", labels, lead, f"[{lead_text}] like hidden without H")
    elif options.hard_weight > 0:
        raise ValueError(f"labels: expected labels [{lead_text}] since hard_weight={options.hard_weight:g}, "
                         f"found None; pass labels or set hard_weight=0")
    device = hidden.device
    for name, t in (("weight", weight), ("bias", bias), ("topk_ids", topk_ids), ("topk_logprobs", topk_logprobs),
                    ("tail_logmass", tail_logmass), ("labels", labels)):
        if t is not None and t.device != device:
            raise ValueError(f"{name}: expected a tensor on {device} (where hidden is), found one on {t.device}")

    cdt = compute_dtype_of(hidden, weight, bias)
    rows = hidden.numel() // size if size else 0
    flat_labels = None if labels is None else labels.reshape(rows)
    keep = (torch.ones(rows, dtype=torch.bool, device=device) if flat_labels is None
            else flat_labels != options.ignore_index)
    n = keep.sum() if num_items is None else torch.as_tensor(num_items, device=device).reshape(())
    batch = Batch(hidden.reshape(rows, size), weight, bias, topk_ids.reshape(rows, top_k),
                  topk_logprobs.reshape(rows, top_k), None if tail_logmass is None else tail_logmass.reshape(rows),
                  flat_labels, keep, n.to(cdt).clamp(min=1.0), cdt, options.tail)
    _check_values(batch, options)
    return batch


def _problems(batch: Batch, start: int, stop: int, options: LossOptions) -> dict[str, Tensor]:
    """Boolean masks of bad values in rows ``start:stop`` (kept rows and real entries only)."""
    vocab, keep = batch.weight.shape[0], batch.keep[start:stop]
    raw_lp = batch.topk_logprobs[start:stop]
    real = keep[:, None] & (raw_lp > float("-inf"))  # NaN is not > -inf: caught below, not padding
    ids = batch.topk_ids[start:stop].long()
    # Distinct ids per row: padded entries get distinct negative stand-ins first.
    stand_in = -1 - torch.arange(ids.shape[1], device=ids.device)
    ordered = torch.where(real, ids, stand_in).sort(dim=1).values
    found = {
        "logprob": keep[:, None] & (raw_lp.isnan() | (raw_lp > _LOGPROB_SLACK)),
        "id": real & ((ids < 0) | (ids >= vocab)),
        "repeat": ordered[:, 1:] == ordered[:, :-1],
    }
    if batch.labels is not None:
        labels = batch.labels[start:stop]
        found["label"] = keep & ((labels < 0) | (labels >= vocab))
    if batch.tail_logmass is not None:
        tail = batch.tail_logmass[start:stop]
        found["tail"] = keep & (tail.isnan() | (tail > _LOGPROB_SLACK))
    if options.tail != "renorm":
        mass = torch.logsumexp(raw_lp.to(batch.compute_dtype).masked_fill(~real, float("-inf")), dim=1)
        found["mass"] = keep & (mass > _MASS_SLACK)
    return found


# Rows validated at a time: bounds the check's temporaries (~50 bytes per
# top-K entry) to a few MiB whatever N, like one chunk of the fused loss.
_CHECK_BLOCK = 2048


def _check_values(batch: Batch, options: LossOptions) -> None:
    """Raise on the first bad value; one host sync when everything is fine."""
    blocks = range(0, batch.rows, _CHECK_BLOCK)
    any_bad = torch.zeros((), dtype=torch.bool, device=batch.hidden.device)
    for start in blocks:
        for mask in _problems(batch, start, min(start + _CHECK_BLOCK, batch.rows), options).values():
            any_bad |= mask.any()
    if not any_bad:
        return
    for start in blocks:  # only on failure: find the first offender and say what it is
        found = _problems(batch, start, min(start + _CHECK_BLOCK, batch.rows), options)
        for problem, mask in found.items():
            if mask.any():
                where = tuple(int(i) for i in mask.nonzero()[0])
                _raise(problem, (start + where[0], *where[1:]), batch, options)


def _raise(problem: str, at: tuple[int, ...], batch: Batch, options: LossOptions) -> None:
    r = at[0]
    vocab = batch.weight.shape[0]
    if problem == "logprob":
        raise ValueError(f"topk_logprobs: expected log-probabilities (≤ 0, or -inf for padding), found "
                         f"{batch.topk_logprobs[at].item()!r} at row {r}, entry {at[1]}; "
                         f"pass log_softmax values, not logits")
    if problem == "id":
        raise ValueError(f"topk_ids: expected ids in [0, V) = [0, {vocab}) where topk_logprobs > -inf, "
                         f"found {batch.topk_ids[at].item()} at row {r}, entry {at[1]}; "
                         f"is the cache from another vocabulary?")
    if problem == "repeat":
        row = [i for i, lp in zip(batch.topk_ids[r].tolist(), batch.topk_logprobs[r].tolist()) if lp > float("-inf")]
        repeated = next(i for i in row if row.count(i) > 1)
        raise ValueError(f"topk_ids: expected distinct ids in each row, found id {repeated} twice in row {r}; "
                         f"mark a repeated entry as padding with log-prob -inf")
    if problem == "label":
        raise ValueError(f"labels: expected ids in [0, {vocab}) or ignore_index={options.ignore_index}, "
                         f"found {batch.labels[r].item()} at row {r}")
    if problem == "tail":
        raise ValueError(f"tail_logmass: expected a log-mass ≤ 0 (or -inf), found {batch.tail_logmass[r].item()!r} "
                         f"at row {r}")
    real = batch.topk_logprobs[r].double()
    mass = real[real > float("-inf")].exp().sum().item()
    raise ValueError(f"topk_logprobs: expected the top-K probabilities of a row to sum to ≤ 1, found {mass:.4f} "
                     f"at row {r}; the values must be log-probabilities over the full vocabulary "
                     f"(use tail='renorm' for scores normalised otherwise)")
