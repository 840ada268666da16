"""The public loss: :func:`distill_loss` and its module form :class:`DistillLoss`."""

from __future__ import annotations

from torch import Tensor, nn

from destila.losses.chunked import chunked_loss
from destila.losses.dense import dense_loss
from destila.losses.fused import fused_loss
from destila.losses.inputs import check_and_prepare
from destila.losses.options import LossOptions
from destila.losses.plan import plan_for

_IMPLS = {"fused": fused_loss, "chunked": chunked_loss, "dense": dense_loss}
# The keyword defaults below are LossOptions' own, so the two cannot differ.
_DEFAULT = LossOptions()
_OPTION_NAMES = frozenset(LossOptions.__dataclass_fields__)


def _run(options: LossOptions, hidden, weight, topk_ids, topk_logprobs, tail_logmass, labels, bias, num_items,
         return_stats: bool):
    batch = check_and_prepare(hidden, weight, topk_ids, topk_logprobs, tail_logmass, labels, bias, num_items,
                              options)
    # The cross-entropy is computed for the loss, or for the statistics whenever labels are given.
    want_hard = labels is not None and (options.hard_weight > 0 or return_stats)
    plan = plan_for(options, batch.hidden, batch.weight, batch.bias)
    loss, sums = _IMPLS[options.impl](batch, options, want_hard, plan)
    if not return_stats:
        return loss
    stats = {
        "soft": sums.soft.detach().float(),
        "hard": sums.hard.detach().float(),
        "rows": batch.keep.sum().float(),
        "agree": sums.agree.detach().float(),
    }
    return loss, stats


def distill_loss(
    hidden: Tensor, weight: Tensor, topk_ids: Tensor, topk_logprobs: Tensor,
    tail_logmass: Tensor | None = None, labels: Tensor | None = None, *,
    bias: Tensor | None = None, divergence: str = _DEFAULT.divergence, beta: float = _DEFAULT.beta,
    tail: str = _DEFAULT.tail, temperature: float = _DEFAULT.temperature, soft_weight: float = _DEFAULT.soft_weight,
    hard_weight: float = _DEFAULT.hard_weight, num_items: int | Tensor | None = None,
    ignore_index: int = _DEFAULT.ignore_index, impl: str = _DEFAULT.impl, chunk_size: int | None = _DEFAULT.chunk_size,
    precision: str = _DEFAULT.precision, kernels: str = _DEFAULT.kernels, return_stats: bool = False,
):
    """Distillation loss of a student's last hidden states against a teacher's cached top-K.

    Shapes (``N`` rows, or ``[B, T]`` flattened to ``N = B·T``):

    - hidden ``[N, H]`` / ``[B, T, H]``, weight ``[V, H]``, bias ``[V]`` or None
      (the student's lm_head: ``z = hidden @ weight.T + bias``);
    - topk_ids ``[N, K]`` int32/int64, topk_logprobs ``[N, K]`` (any float
      dtype; log-probabilities over the full vocabulary; ``-inf`` marks a
      padded entry, whose id is ignored);
    - tail_logmass ``[N]``: log of the teacher's mass outside its top-K. If
      None with ``tail="bucket"`` it is derived as
      ``log(-expm1(logsumexp(topk_logprobs)))``; the cached value is more
      accurate (computed from the teacher's full logsumexp, not from rounded
      probabilities);
    - labels ``[N]`` int, ``ignore_index`` drops a row from both terms.

    Returns the 0-dim loss (float32, or float64 for float64 inputs)::

        L = (1/n) Σ_{kept rows} [ soft_weight·T²·D(p ‖ q_T) + hard_weight·CE(z, label) ]

    ``n`` = ``num_items`` if given (the kept rows of the whole accumulated
    batch), else the number of kept rows; clamped to ≥ 1, so all rows dropped
    gives 0 with zero gradients. Naive equivalent (forward KL, bucket tail)::

        logits = hidden @ weight.T + bias                          # [N, V]
        log_q = log_softmax(logits / T, -1)
        rest = ones(N, V, bool).scatter(1, ids, False)
        lq = cat([log_q.gather(1, ids), logsumexp(log_q.masked_fill(~rest, -inf), -1, keepdim=True)], 1)
        lp = cat([topk_logprobs, tail_logmass[:, None]], 1)
        L = T**2 * (lp.exp() * (lp - lq)).sum() / N

    Options are those of :class:`LossOptions` (divergence, beta, tail,
    temperature, soft_weight, hard_weight, ignore_index, impl, chunk_size,
    precision, kernels). ``impl="fused"`` never holds more than ``chunk_size × V``
    logits (chunk_size None: chosen from V, H and the free memory);
    ``"chunked"`` and ``"dense"`` are the baselines. Gradients flow to hidden,
    weight and bias for every impl. ``precision`` and ``kernels`` choose how
    fused computes (bf16 tensor-core GEMMs, Triton row kernels on CUDA);
    :func:`destila.losses.describe_path` says which path a call takes.

    With ``return_stats=True`` returns ``(loss, stats)``; stats are detached
    float32 0-dim sums over kept rows: ``soft`` (Σ D, no T² or weights),
    ``hard`` (Σ CE at T = 1; 0 without labels), ``rows`` (kept rows),
    ``agree`` (rows where the student's argmax is the teacher's top-1 id).

    Raises ``ValueError`` naming the argument for a bad option, a shape
    mismatch, an id out of range or repeated within a row, a label out of
    range, or a non-finite / positive teacher log-prob on a kept row.
    """
    options = LossOptions(**{name: value for name, value in locals().items() if name in _OPTION_NAMES})
    return _run(options, hidden, weight, topk_ids, topk_logprobs, tail_logmass, labels, bias, num_items,
                return_stats)


def distill_loss_with(options: LossOptions, hidden: Tensor, weight: Tensor, topk_ids: Tensor, topk_logprobs: Tensor,
                      tail_logmass: Tensor | None = None, labels: Tensor | None = None, *, bias: Tensor | None = None,
                      num_items: int | Tensor | None = None, return_stats: bool = False):
    """:func:`distill_loss` with its options as one :class:`LossOptions` (validated once, where it was made).

    Naive equivalent: ``distill_loss(hidden, weight, ..., **dataclasses.asdict(options))``.
    """
    return _run(options, hidden, weight, topk_ids, topk_logprobs, tail_logmass, labels, bias, num_items,
                return_stats)


class DistillLoss(nn.Module):
    """:func:`distill_loss` as a module: the options are fixed (and validated) at construction.

    >>> loss_fn = DistillLoss(divergence="forward_kl", temperature=2.0, hard_weight=0.5)
    >>> loss = loss_fn(hidden, lm_head.weight, topk_ids, topk_logprobs, tail_logmass, labels)
    """

    def __init__(self, **options):
        super().__init__()
        unknown = sorted(set(options) - set(LossOptions.__dataclass_fields__))
        if unknown:
            raise ValueError(f"DistillLoss: expected options among {sorted(LossOptions.__dataclass_fields__)}, "
                             f"found unknown {unknown}")
        self.options = LossOptions(**options)

    def forward(self, hidden: Tensor, weight: Tensor, topk_ids: Tensor, topk_logprobs: Tensor,
                tail_logmass: Tensor | None = None, labels: Tensor | None = None, bias: Tensor | None = None,
                num_items: int | Tensor | None = None, return_stats: bool = False):
        return _run(self.options, hidden, weight, topk_ids, topk_logprobs, tail_logmass, labels, bias, num_items,
                    return_stats)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v!r}" for k, v in vars(self.options).items())
