"""Cutting a student from the teacher: some of its decoder layers, everything else copied.

Cutting keeps the embeddings, the final norm and the output head, so the
student starts in the teacher's representation space and its first
distillation steps are spent repairing the missing layers, not relearning the
vocabulary.
"""

from __future__ import annotations

import re

from destila.student.layers import check_layer_indices, evenly_spaced_layers

# Where each supported family keeps its decoder layers in the state dict.
# Other families may well work, but they are refused until a test covers them.
LAYER_PREFIXES = {
    "llama": "model.layers",
    "mistral": "model.layers",
    "qwen2": "model.layers",
    "qwen3": "model.layers",
    "gpt2": "transformer.h",
}


def _supported_prefix(config) -> str:
    prefix = LAYER_PREFIXES.get(config.model_type)
    if prefix is None:
        raise ValueError(
            f"student init: model type {config.model_type!r} is not supported for layer cutting; "
            f"supported: {', '.join(sorted(LAYER_PREFIXES))}. Use --config to build a fresh student instead."
        )
    return prefix


def cut_student(teacher, layers: int | None = None, indices: list[int] | None = None):
    """A new model with some of the teacher's decoder layers, all else copied.

    Give ``layers`` (that many, evenly spaced) or ``indices`` (exactly those
    teacher layers, e.g. ``[0, 1, ..., 7, 27, 28, 29]``: the first ones and the
    last ones, which on SmolLM2 keeps the student's starting perplexity far
    lower than an even spread; see docs/demo.md).

    The student is returned in eval mode (dropout off), as measured.

    Naive equivalent: ``copy.deepcopy(teacher)`` then delete the other layers
    from its ``ModuleList`` and fix ``num_hidden_layers`` (and any per-layer
    config lists such as ``layer_types``) to match.
    """
    # transformers takes seconds to import: only when a student is cut
    from transformers import AutoModelForCausalLM

    config = teacher.config
    prefix = _supported_prefix(config)
    total = config.num_hidden_layers
    if (layers is None) == (indices is None):
        raise ValueError("student: give either a number of layers or the layer indices to keep")
    kept = evenly_spaced_layers(total, layers) if indices is None else check_layer_indices(indices, total)
    layers = len(kept)

    student_config = config.__class__.from_dict(config.to_dict())
    student_config.num_hidden_layers = layers
    # Per-layer settings (e.g. Qwen's layer_types) must follow the kept layers.
    for key, value in list(vars(student_config).items()):
        if isinstance(value, list) and len(value) == total and key != "architectures":
            setattr(student_config, key, [value[i] for i in kept])

    student = AutoModelForCausalLM.from_config(student_config)
    pattern = re.compile(rf"^{re.escape(prefix)}\.(\d+)\.")
    new_index = {old: new for new, old in enumerate(kept)}
    state = {}
    for key, tensor in teacher.state_dict().items():
        match = pattern.match(key)
        if match is None:
            state[key] = tensor
        elif int(match.group(1)) in new_index:
            state[f"{prefix}.{new_index[int(match.group(1))]}.{key[match.end():]}"] = tensor
    missing, unexpected = student.load_state_dict(state, strict=False)
    # Tied heads appear as "missing" (they share the embedding) and are fine.
    tied = {k for k in missing if k.endswith("lm_head.weight")} if config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"student init: weights did not map cleanly (missing {missing}, unexpected {unexpected})")
    student.tie_weights()
    return student.eval(), kept  # like the teacher: a model built from a config starts in training mode
