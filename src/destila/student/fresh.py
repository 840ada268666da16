"""A fresh student: a randomly initialised model of the teacher's architecture with config changes."""

from __future__ import annotations

import json
from pathlib import Path

from destila.models.config_checks import check_model_config, config_error_message


def parse_config_overrides(items: list[str]) -> dict:
    """``--config`` values: a JSON file, a JSON object, or ``key=value`` pairs (values parsed as JSON when they can be)."""
    overrides: dict = {}
    for item in items:
        path = Path(item)
        if item.endswith(".json") and path.is_file():
            overrides.update(json.loads(path.read_text()))
        elif item.lstrip().startswith("{"):
            try:
                overrides.update(json.loads(item))
            except json.JSONDecodeError as err:
                raise ValueError(f"config: expected a JSON object, found {item!r} ({err})") from err
        elif "=" in item:
            key, raw = item.split("=", 1)
            try:
                overrides[key.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                overrides[key.strip()] = raw
        else:
            raise ValueError(f"config: expected a .json file, a JSON object or key=value, found {item!r}")
    return overrides


def fresh_student(teacher, overrides: dict, seed: int = 0, tokenizer=None):
    """A randomly initialised model of the teacher's architecture with ``overrides`` applied to its config.

    ``tokenizer``: a student tokenizer with another vocabulary; the model's vocabulary is its size."""
    # transformers takes seconds to import (torch with it): only when a fresh student is built
    import torch
    from transformers import AutoModelForCausalLM

    config = teacher.config.__class__.from_dict(teacher.config.to_dict())
    known = set(config.to_dict()) | set(getattr(config, "attribute_map", {}))
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ValueError(
            f"config: {config.model_type} has no field(s) {', '.join(unknown)}; "
            f"known fields include {', '.join(sorted(k for k in known if not k.startswith('_'))[:40])}"
        )
    for key, value in overrides.items():
        try:
            setattr(config, key, value)
        except Exception as err:  # a strict config refuses a value of the wrong type as it is set
            message = config_error_message(err, f"--config {key}={value!r}")
            if message is None:
                raise
            raise ValueError(message) from None
    if tokenizer is not None:
        if "vocab_size" in overrides and overrides["vocab_size"] != len(tokenizer):
            raise ValueError(f"config: vocab_size {overrides['vocab_size']} differs from the {len(tokenizer)} tokens "
                             "of --tokenizer; leave vocab_size out, it follows the tokenizer")
        config.vocab_size = len(tokenizer)
    elif config.vocab_size != teacher.config.vocab_size:
        raise ValueError(
            f"config: vocab_size must stay {teacher.config.vocab_size} (the teacher's tokenizer), "
            f"found {config.vocab_size}"
        )
    check_model_config(config, "--config", "give values the architecture allows")  # before any weight is built
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)
