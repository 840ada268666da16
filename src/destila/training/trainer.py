"""`DistillationTrainer`: a `transformers.Trainer` whose loss is the distillation loss.

The student runs its ordinary forward, and its output head, instead of
logits, returns :func:`destila.distill_loss` of the hidden states it is given
against its own weight (and bias) (:mod:`destila.training.head_loss`), so
with the default ``impl="fused"`` the ``[B, T, V]`` student logits never
exist and sharded engines gather the head's weight as for any forward. Targets
come from the batch (a cache) or from an :class:`OnlineTeacher`.

Normalisation: the Trainer counts the valid labels of the whole accumulated
batch (``num_items_in_batch``, summed over processes); every micro-batch
divides its loss sum by that count, so micro-batch 1 × accumulation 4 and
micro-batch 4 × accumulation 1 give the same gradient.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from transformers import Trainer

from destila.models import check_plain_head
from destila.targets.online import OnlineTeacher, dense_online_loss
from destila.training.engines import enable_cpu_fsdp
from destila.training.head_loss import distill_through_forward

_STATS = ("soft", "hard", "rows", "agree")


class DistillationTrainer(Trainer):
    """Trainer for ``DistillationArguments``; pass ``teacher=OnlineTeacher(...)`` for online distillation."""

    # compute_loss divides by num_items_in_batch itself: the Trainer must not
    # divide again by the accumulation steps.
    loss_is_scaled_for_ga = True

    def __init__(self, *args, teacher: OnlineTeacher | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        check_plain_head(self.model)
        self.teacher = teacher.to(self.args.device) if teacher is not None else None
        # Count valid labels for num_items_in_batch (the Trainer only does so
        # for models that "accept loss kwargs"); our labels are already shifted.
        self.model_accepts_loss_kwargs = True
        self._loss_shifts_labels = False
        self._window = torch.zeros(len(_STATS), dtype=torch.float64)

    def create_accelerator_and_postprocess(self):
        super().create_accelerator_and_postprocess()
        enable_cpu_fsdp(self)

    # -- loss -----------------------------------------------------------------

    def _targets(self, inputs: dict) -> dict:
        if "topk_ids" in inputs or "teacher_logits" in inputs:
            return inputs
        if self.teacher is None:
            raise ValueError("batch: expected the cache's top-K fields or an online teacher, found neither")
        return {**inputs, **self.teacher.targets(inputs["input_ids"])}

    def _distill(self, model, inputs: dict, num_items=None, **overrides):
        """``(loss, stats)`` for one batch, with the args' loss options updated by ``overrides``."""
        inputs = self._targets(inputs)
        options = {**dataclasses.asdict(self.args.loss_options()), **overrides}
        labels = inputs["labels"]
        if "teacher_logits" in inputs:  # online dense: the paper's full-vocabulary baseline
            logits = model(input_ids=inputs["input_ids"], use_cache=False).logits
            keep = {k: options[k] for k in ("divergence", "beta", "temperature", "soft_weight", "hard_weight")}
            return dense_online_loss(
                logits.flatten(0, 1), inputs["teacher_logits"].flatten(0, 1), labels.flatten(),
                num_items=num_items, **keep,
            )
        # The head computes the loss inside its own forward, where sharded
        # engines (FSDP, ZeRO-3) have gathered its weight.
        return distill_through_forward(model, inputs, options, num_items)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss, stats = self._distill(model, inputs, num_items_in_batch)
        if model.training:
            self._window += torch.stack([stats[k].double().cpu() for k in _STATS])
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            # num_items_in_batch counts every process's rows, and DDP averages
            # gradients over processes: scale back up to a global sum / count.
            loss = loss * self.accelerator.num_processes
        return (loss, {"stats": stats}) if return_outputs else loss

    # -- logging and evaluation -------------------------------------------------

    def _reduce(self, sums: torch.Tensor) -> torch.Tensor:
        if self.accelerator.num_processes > 1:
            sums = self.accelerator.reduce(sums.to(self.args.device), reduction="sum").cpu()
        return sums

    @staticmethod
    def _metrics(sums: torch.Tensor, prefix: str = "") -> dict:
        soft, hard, rows, agree = sums.tolist()
        rows = max(rows, 1.0)
        ce = hard / rows
        return {
            f"{prefix}kl": soft / rows,
            f"{prefix}ce": ce,
            f"{prefix}ppl": math.exp(min(ce, 50.0)),
            f"{prefix}top1_agreement": agree / rows,
        }

    def log(self, logs: dict, *args, **kwargs) -> None:
        """Add the training window's KL, CE, perplexity and top-1 agreement to each training log."""
        if "loss" in logs and self._window[2] > 0:
            logs = {**logs, **self._metrics(self._reduce(self._window))}
            self._window.zero_()
        super().log(logs, *args, **kwargs)

    @torch.no_grad()
    def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix: str = "eval") -> dict:
        """Held-out metrics summed over every process: KL to the teacher (forward KL over
        the top-K buckets with the student at T = 1; over the full vocabulary for online
        dense), cross-entropy, perplexity and top-1 agreement. ``eval_loss`` is that KL,
        so ``metric_for_best_model="loss"`` keeps the student closest to the teacher."""
        # The wrapped model: under FSDP the unwrapped one holds only shards.
        model = self.model_wrapped if self.model_wrapped is not None else self.model
        was_training = model.training
        model.eval()
        sums = torch.zeros(len(_STATS), dtype=torch.float64)
        for inputs in self.get_eval_dataloader(eval_dataset):
            _, stats = self._distill(
                model, self._prepare_inputs(inputs),
                divergence="forward_kl", tail="bucket", temperature=1.0, soft_weight=1.0, hard_weight=0.0,
            )
            sums += torch.stack([stats[k].double().cpu() for k in _STATS])
        model.train(was_training)
        metrics = self._metrics(self._reduce(sums), f"{metric_key_prefix}_")
        metrics[f"{metric_key_prefix}_loss"] = metrics[f"{metric_key_prefix}_kl"]
        self.log(metrics)
        self.control = self.callback_handler.on_evaluate(self.args, self.state, self.control, metrics)
        return metrics
