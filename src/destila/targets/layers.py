"""The outputs of chosen decoder layers, captured during an ordinary forward.

Layer ``i`` means what decoder layer ``i`` (0-based) returns, before the
final norm: ``outputs.hidden_states[i + 1]`` in transformers for every layer
but the last (whose ``hidden_states`` entry has the final norm applied).
Forward hooks capture them, so the forward that gives the final hidden
states (and, under DDP, synchronises gradients) gives these too; nothing
runs twice.

Naive equivalent::

    states = model(input_ids, output_hidden_states=True).hidden_states
    chosen = [states[i + 1] for i in layers]
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Sequence

import torch
from torch import nn

from destila.models import decoder_of

_LAYER_LISTS = ("layers", "h", "blocks")


def decoder_layers(model) -> nn.ModuleList:
    """The ``ModuleList`` of the model's decoder layers (``model.layers`` for Llama-like, ``transformer.h`` for GPT-2)."""
    inner = getattr(model, "module", model)  # DDP and friends keep the model in .module
    base = decoder_of(inner)
    for name in _LAYER_LISTS:
        found = getattr(base, name, None)
        if isinstance(found, nn.ModuleList):
            return found
    raise ValueError(
        f"model: cannot find the decoder layers of {type(inner).__name__} (looked for "
        f"{', '.join(_LAYER_LISTS)} on its base model); hidden-state distillation needs them"
    )


def layer_count(model) -> int:
    return len(decoder_layers(model))


@contextmanager
def capture_layer_outputs(model, layers: Sequence[int]):
    """Within the block, every forward of ``model`` stores layer ``i``'s output ``[B, T, H]`` in the yielded dict."""
    modules = decoder_layers(model)
    for i in layers:
        if not 0 <= i < len(modules):
            raise ValueError(f"layers: the model has decoder layers 0..{len(modules) - 1}, found {i}")
    captured: dict[int, torch.Tensor] = {}
    handles = []
    for i in dict.fromkeys(layers):
        def keep(_module, _args, output, index=i):
            captured[index] = output[0] if isinstance(output, (tuple, list)) else output

        handles.append(modules[i].register_forward_hook(keep))
    try:
        yield captured
    finally:
        for handle in handles:
            handle.remove()
