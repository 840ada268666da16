"""Training never saves a non-finite model as a success.

- :func:`check_finite_arguments`: ``--learning_rate inf``, ``--weight_decay nan``,
  ``--max_grad_norm nan`` (any float option that is NaN or infinite) is
  refused before anything is loaded;
- :func:`check_loss`: each micro-batch's loss (the Trainer already syncs on
  it every step: it filters NaN losses out of what it logs, which is how a
  diverged run used to finish "successfully");
- :class:`FiniteGradients`: the gradients before each optimizer step, after
  clipping (a NaN or infinite norm makes every clipped gradient NaN);
- :func:`check_weights`: the weights before every checkpoint and before the
  final save.

Each stops the run with :class:`NonFiniteTraining` (a ``ValueError``: one line
on the command line), naming the optimizer step, before that step writes
anything: the checkpoints already written stay as they were.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import TrainerCallback

from destila.models.finite import all_finite, describe_nonfinite, nonfinite_tensors
from destila.training.argument_ranges import check_finite_arguments  # noqa: F401  (declared with the ranges: light)


class NonFiniteTraining(ValueError):
    """Training produced a NaN or infinite loss, gradient or weight."""


def _advice(step: int, args) -> str:
    saved = sorted(int(p.name.split("-")[1]) for p in Path(args.output_dir).glob("checkpoint-*")
                   if p.name.split("-")[1].isdigit())
    kept = f"checkpoint-{saved[-1]} is as it was" if saved else "no checkpoint was written before it"
    return (f"at optimizer step {step} (learning rate {args.learning_rate:g}); nothing was saved at or after "
            f"it ({kept}). Lower --learning_rate, set --max_grad_norm, or check the student and the cache "
            "(destila cache verify), then run again")


def check_loss(loss: torch.Tensor, state, args) -> None:
    """Raise when a micro-batch's ``loss`` is NaN or infinite (the step being computed is ``global_step + 1``)."""
    if not bool(torch.isfinite(loss.detach()).all()):
        raise NonFiniteTraining(f"train: the loss became {loss.detach().float().sum().item()} "
                                + _advice(state.global_step + 1, args))


def check_weights(model, state, args, when: str) -> None:
    """Raise before ``when`` (a checkpoint, the final save) writes a model with non-finite weights."""
    found = nonfinite_tensors(model.named_parameters())
    if found:
        raise NonFiniteTraining(f"train: the weights became non-finite ({describe_nonfinite(found)}) before {when}, "
                                + _advice(state.global_step, args))


class FiniteGradients(TrainerCallback):
    """Stops before an optimizer step whose (clipped) gradients hold a NaN or an infinity."""

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        if args.fp16:  # the loss scaler skips a step with overflowed gradients by design (the loss is still checked)
            return
        if model is not None and not all_finite(p.grad for p in model.parameters() if p.grad is not None):
            raise NonFiniteTraining("train: the gradients became non-finite " + _advice(state.global_step + 1, args))
