"""Online distillation, the baseline the cache is measured against.

The teacher runs on every batch. ``online_loss="dense"`` is the paper's
online setting: full ``[N, V]`` teacher and student distributions and a plain
full-vocabulary divergence (:func:`destila.losses.full_vocab.full_vocab_loss`). ``online_loss="topk"`` takes the teacher's top-K
on the fly (chunk by chunk, as the cache writer does) and feeds the very same
loss as offline training, so the two differ only in where the top-K comes from.
"""

from __future__ import annotations

import torch

from destila.models import check_plain_head, decoder_of
from destila.models.placement import head_weights, input_device
from destila.targets.head import teacher_topk
from destila.targets.layers import capture_layer_outputs
from destila.targets.spec import TargetSpec


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
