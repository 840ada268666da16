"""A model's configuration checked before any weight is built, and weights whose shapes are not the config's.

transformers accepts ``num_hidden_layers: -1`` or ``vocab_size: 0`` and
builds a model that fails later (or never, silently: a teacher with no
layers is only its embedding and head); a config whose hidden size is not a
multiple of its heads fails inside huggingface_hub's strict dataclass with a
traceback. :func:`check_model_config` refuses all of them in one line naming
the field and where the config came from; :func:`mismatch_message` names the
tensor whose stored shape differs from the one the config gives.

Naive equivalent::

    assert config.num_hidden_layers >= 1 and config.hidden_size % config.num_attention_heads == 0, ...
"""

from __future__ import annotations

from pathlib import Path

_POSITIVE = ("vocab_size", "num_hidden_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
             "intermediate_size")
"""Fields that count something (read through the config's attribute map: GPT-2's n_layer is num_hidden_layers)."""


def _value(config, name: str):
    try:
        return getattr(config, name, None)
    except Exception:  # a config class whose property raises when a field it derives from is unset
        return None


def config_faults(config) -> list[str]:
    """What is impossible in ``config`` (a transformers ``PretrainedConfig``), one phrase per fault."""
    faults = []
    for name in _POSITIVE:
        value = _value(config, name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            faults.append(f"{name} is {value!r}, expected an integer ≥ 1")
    if faults:
        return faults
    hidden, heads = _value(config, "hidden_size"), _value(config, "num_attention_heads")
    kv_heads, head_dim = _value(config, "num_key_value_heads"), _value(config, "head_dim")
    if hidden and heads and head_dim is None and hidden % heads:
        faults.append(f"hidden_size {hidden} is not a multiple of num_attention_heads {heads}")
    if heads and kv_heads and heads % kv_heads:
        faults.append(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv_heads}")
    if not faults and hasattr(config, "validate"):  # the architecture's own rules (transformers ≥ 5)
        try:
            config.validate()
        except Exception as err:  # huggingface_hub's StrictDataclassClassValidationError, not a ValueError
            faults.append(_last_line(err))
    return faults


def check_model_config(config, where: str, remedy: str = "fix it") -> None:
    """Raise one ``ValueError`` naming ``where`` (the config's file or origin) and the first fault of ``config``."""
    faults = config_faults(config)
    if faults:
        raise ValueError(f"model: {where} is not a usable configuration ({faults[0]}); {remedy}")


def config_error_message(err: BaseException, where: str) -> str | None:
    """The one line for an error transformers raised while reading a config, or None if it is not about the config."""
    if type(err).__name__.startswith("StrictDataclass"):
        return (f"model: {where} is not a usable configuration ({_last_line(err)}); fix it, or use the "
                "config.json the weights were saved with")
    return None


def mismatch_message(source: str, config) -> str:
    """One line naming a stored tensor whose shape differs from what ``config`` builds (the first in name order)."""
    # transformers takes seconds to import: only when a checkpoint does not match its config
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        expected = {k: tuple(v.shape) for k, v in AutoModelForCausalLM.from_config(config).state_dict().items()}
    for file in sorted(Path(source).glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as handle:
            for key in sorted(handle.keys()):
                shape = tuple(handle.get_slice(key).get_shape())
                if key in expected and expected[key] != shape:
                    return (f"model: {file} holds {key} of shape {list(shape)}, but its config.json gives "
                            f"{list(expected[key])}; the weights and config.json belong to different models: "
                            "replace one of them with its intact copy")
    return (f"model: the weights in {source} do not have the shapes its config.json gives; the weights and "
            "config.json belong to different models: replace one of them with its intact copy")


def _last_line(err: BaseException) -> str:
    lines = [line.strip() for line in str(err).strip().splitlines() if line.strip()]
    last = lines[-1] if lines else type(err).__name__
    return last.removeprefix("ValueError: ")
