"""Online distillation, the baseline the cache is measured against.

The teacher runs on every batch. ``online_loss="dense"`` is the paper's
online setting: full ``[N, V]`` teacher and student distributions and a plain
full-vocabulary divergence. ``online_loss="topk"`` takes the teacher's top-K
on the fly (chunk by chunk, as the cache writer does) and feeds the very same
loss as offline training, so the two differ only in where the top-K comes from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from destila.targets.head import teacher_topk
from destila.constants import IGNORE_INDEX
from destila.losses.divergences import full_vocab_divergence
from destila.models import check_plain_head, decoder_of
from destila.placement import head_weights, input_device
from destila.targets.spec import TargetSpec


def dense_online_loss(
    student_logits, teacher_logits, labels, *, divergence="forward_kl", beta=0.5, temperature=1.0,
    soft_weight=1.0, hard_weight=0.0, num_items=None, ignore_index=IGNORE_INDEX,
):
    """``(loss, stats)`` with the normalisation of :func:`destila.distill_loss`.

    ``student_logits``, ``teacher_logits`` ``[N, V]``; ``labels`` ``[N]``.
    ``loss = Σ_valid (soft·T²·D + hard·CE) / n``, n = ``num_items`` or the
    number of valid rows (≥ 1); ``stats`` holds the detached sums ``soft``,
    ``hard``, ``rows`` and ``agree`` (student argmax = teacher argmax).
    """
    valid = labels != ignore_index
    divergence_rows = full_vocab_divergence(student_logits, teacher_logits, divergence, beta, temperature)
    ce_rows = F.cross_entropy(student_logits.float(), labels.clamp_min(0), reduction="none")
    zero = torch.zeros((), device=student_logits.device)
    soft = torch.where(valid, divergence_rows, zero).sum()
    hard = torch.where(valid, ce_rows, zero).sum()
    n = torch.as_tensor(num_items if num_items is not None else valid.sum(), device=soft.device).clamp_min(1)
    loss = (soft_weight * temperature**2 * soft + hard_weight * hard) / n
    agree = (student_logits.argmax(-1) == teacher_logits.argmax(-1)) & valid
    stats = {"soft": soft.detach(), "hard": hard.detach(), "rows": valid.sum().float(), "agree": agree.sum().float()}
    return loss, stats


class OnlineTeacher:
    """The teacher, frozen, producing targets of ``spec`` for a batch of ``input_ids [B, T]``.

    ``mode="topk"`` computes exactly what the cache would store for ``spec``;
    ``mode="dense"`` returns the full tempered-later logits (the baseline).
    """

    def __init__(self, model, mode: str, spec: TargetSpec | None = None):
        check_plain_head(model)
        self.model = model.eval().requires_grad_(False)
        self.mode, self.spec = mode, spec or TargetSpec()

    def to(self, device):
        if getattr(self.model, "hf_device_map", None) is None:  # a device-mapped teacher stays where it was put
            self.model.to(device)
        return self

    @torch.no_grad()
    def targets(self, input_ids, layers=(), **model_inputs) -> dict:
        """``{"teacher_logits" [B, T, V]}`` (dense) or the cache's top-K fields (topk); with ``layers``,
        also ``teacher_layers``: ``{layer: [B, T, H]}``, those decoder layers' outputs. On ``input_ids``' device."""
        device = input_device(self.model)  # a device-mapped teacher takes its inputs where its embedding runs
        moved = {key: value.to(device) if torch.is_tensor(value) else value for key, value in model_inputs.items()}
        with head_weights(self.model) as (weight, bias):  # brought in from CPU/disk if offloaded
            found = self._targets(weight, bias, input_ids.to(device), layers, **moved)
        back = {key: value.to(input_ids.device) for key, value in found.items() if torch.is_tensor(value)}
        if "teacher_layers" in found:
            back["teacher_layers"] = {k: v.to(input_ids.device) for k, v in found["teacher_layers"].items()}
        return back

    def _targets(self, weight, bias, input_ids, layers, **model_inputs) -> dict:
        from destila.targets.layers import capture_layer_outputs

        with capture_layer_outputs(self.model, layers) as captured:
            hidden = decoder_of(self.model)(input_ids=input_ids, use_cache=False, **model_inputs).last_hidden_state
        hidden = hidden.to(weight.device)
        extra = {"teacher_layers": captured} if layers else {}
        if self.mode == "dense":
            logits = hidden.float() @ weight.float().T
            return {"teacher_logits": logits if bias is None else logits + bias.float(), **extra}
        batch, length, _ = hidden.shape
        spec = self.spec
        ids, logprobs, tail = teacher_topk(
            hidden.reshape(batch * length, -1), weight, bias, spec.top_k, spec.temperature, spec.head_chunk_rows
        )
        return {
            "topk_ids": ids.reshape(batch, length, -1),
            "topk_logprobs": logprobs.reshape(batch, length, -1),
            "tail_logmass": tail.reshape(batch, length),
            **extra,
        }
