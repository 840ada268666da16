"""The distillation loss computed inside the student's output head.

Sharded engines (FSDP full-shard, DeepSpeed ZeRO-3) hold each parameter as a
shard outside the forward of the module that owns it, and gather it only
while that module runs. A loss that reads ``lm_head.weight`` after the
forward would see a shard (or a stale copy), and its gradient would bypass
the engine's reduce-scatter. So, during a training step, the head's forward
is swapped for one that takes the hidden states it is given and returns the
fused loss computed on its own (gathered) weight::

    with loss_in_head(model, targets, options) as result:
        output = model(input_ids=input_ids, use_cache=False)
    loss = output.logits          # the 0-dim loss, returned where the logits were

The model's own forward runs unchanged around it, so every wrapper (DDP,
FSDP1/FSDP2, DeepSpeed, PEFT) sees an ordinary forward whose output is the
loss, and synchronises gradients as it would for any loss. Naive
equivalent, without the engines' constraints::

    hidden = model.model(input_ids).last_hidden_state          # [B, T, H]
    loss = distill_loss(hidden, model.lm_head.weight, topk_ids, topk_logprobs, tail, labels, ...)

The swap is an instance attribute set for the duration of one forward and
removed afterwards, so saving, evaluation and generation see the plain head.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from destila.losses import LossOptions, describe_path, distill_loss_with


def unwrap(model):
    """The Hugging Face model inside DDP / FSDP1 / DeepSpeed (``.module``) wrappers; PEFT models stay as they are."""
    while hasattr(model, "module") and isinstance(model.module, torch.nn.Module):
        model = model.module
    return model


def head_module(model) -> torch.nn.Module:
    """The student's output projection module (``lm_head``), found through any wrapper."""
    head = unwrap(model).get_output_embeddings()
    if head is None or not hasattr(head, "weight"):
        raise ValueError(f"model: {type(unwrap(model)).__name__} has no linear output head")
    if type(head).__module__.startswith("peft."):
        raise ValueError(
            "lora_target_modules: the output head itself is adapted; destila's fused loss reads the head's "
            "weight directly, so leave lm_head out of the LoRA target modules"
        )
    return head


@contextmanager
def loss_in_head(model, targets: dict, options: LossOptions, num_items=None, describe: bool = False):
    """While active, ``head(hidden [B, T, H])`` returns the distillation loss (0-dim) instead of logits.

    ``targets`` holds ``topk_ids [B, T, K]``, ``topk_logprobs [B, T, K]``,
    ``tail_logmass [B, T]`` (optional) and position-aligned ``labels [B, T]`` (a collated batch's); ``options``
    the loss's :class:`~destila.losses.LossOptions`. Yields a dict that
    receives ``stats`` (detached sums) once the head has run, and with
    ``describe`` also ``path``: which way the loss ran on these very tensors
    (:func:`destila.losses.describe_path`).
    """
    head = head_module(model)
    result: dict = {}

    def distill_forward(hidden):
        rows = targets["topk_ids"].shape[:-1]
        if hidden.shape[:-1] != rows:
            raise ValueError(
                f"head: expected hidden states for all {tuple(rows)} positions, found {tuple(hidden.shape[:-1])}; "
                "the model applied its head to a subset of positions"
            )
        # The loss accumulates in float32 itself; autocast would round its
        # logits to bf16 before the softmax.
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            loss, stats = distill_loss_with(
                options, hidden, head.weight, targets["topk_ids"], targets["topk_logprobs"],
                targets.get("tail_logmass"), targets["labels"], bias=getattr(head, "bias", None), num_items=num_items,
                return_stats=True,
            )
        result["stats"] = stats
        if describe:
            result["path"] = describe_path(options, hidden, head.weight, getattr(head, "bias", None))
        return loss

    head.forward = distill_forward
    try:
        yield result
    finally:
        del head.forward


def distill_through_forward(model, inputs: dict, options: LossOptions, num_items=None, path: dict | None = None,
                            **model_inputs):
    """``(loss, stats)``: one ordinary forward of ``model`` (with ``model_inputs`` such as
    ``position_ids``) whose head computes the loss; a ``path`` dict receives ``path["path"]``, the line of
    :func:`destila.losses.describe_path` for this forward."""
    with loss_in_head(model, inputs, options, num_items, describe=path is not None) as result:
        output = model(input_ids=inputs["input_ids"], use_cache=False, **model_inputs)
    if "stats" not in result:
        raise ValueError(f"model: {type(unwrap(model)).__name__}.forward never called its output head")
    if path is not None:
        path["path"] = result["path"]
    return output.logits, result["stats"]
