"""Running a subset of a model's decoder layers, in place: what layer importance and the greedy search share.

``running_layers(model, [0, 3, 5])`` makes ``model`` run only those decoder layers inside the block (config
lists such as ``layer_types`` follow); nothing is copied.
"""

from __future__ import annotations

import contextlib

import torch

from destila.student.cut import _supported_prefix

STARTS_FROM_EMBEDS = {"llama", "mistral", "qwen2", "qwen3"}
"""Families whose first decoder layer reads ``inputs_embeds`` as is (GPT-2 adds position embeddings to it), so a
forward may start from any layer's stored input."""


def decoder_layers(model) -> torch.nn.ModuleList:
    """The model's ``ModuleList`` of decoder layers."""
    return model.get_submodule(_supported_prefix(model.config))


@contextlib.contextmanager
def running_layers(model, indices: list[int]):
    """Inside the block, ``model`` runs only its decoder layers ``indices`` (config lists such as ``layer_types`` follow)."""
    prefix = _supported_prefix(model.config)
    parent_name, _, child = prefix.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    config = model.config
    original = getattr(parent, child)
    total = len(original)
    saved = {key: value for key, value in vars(config).items()
             if isinstance(value, list) and len(value) == total and key != "architectures"}
    saved_count = config.num_hidden_layers
    setattr(parent, child, torch.nn.ModuleList([original[i] for i in indices]))
    config.num_hidden_layers = len(indices)
    for key, value in saved.items():
        setattr(config, key, [value[i] for i in indices])
    try:
        yield
    finally:
        setattr(parent, child, original)
        config.num_hidden_layers = saved_count
        for key, value in saved.items():
            setattr(config, key, value)
