"""LoRA students: train low-rank adapters on a frozen student instead of all its weights.

The adapters live inside the decoder's linear layers; the output head stays
a plain (frozen) linear layer, so the fused loss keeps reading its weight
directly. Training saves the adapter the PEFT way (``adapter_config.json`` +
``adapter_model.safetensors`` in the output folder), with the base student's
absolute path as ``base_model_name_or_path`` (a hub id stays a hub id), so
``AutoPeftModelForCausalLM.from_pretrained(out)`` finds the base from any
folder, and destila's commands (``eval``, ``generate``) load it as the base with
the adapter merged; ``PeftModel.from_pretrained(base, out)`` works too. ``merge`` also writes
``out/merged/``, a plain model with the adapters folded into its weights
(``W + (alpha / r) · B A``), which ``AutoModelForCausalLM`` loads without PEFT.

Naive equivalent::

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(student), LoraConfig(r=8, ...))
    ... train ...
    model.save_pretrained(out); model.merge_and_unload().save_pretrained(out / "merged")
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from destila.models import load_causal_lm, resolve_source

MERGED_DIR = "merged"


def plain_loading_note(merged: bool) -> str | None:
    """A line for an adapter folder that ``AutoModelForCausalLM.from_pretrained(OUT)`` cannot read with the
    installed peft, else None: transformers 5 reads adapters through ``peft.utils.transformers_weight_conversion``,
    which peft 0.19 added (and raises ``ModuleNotFoundError`` without it)."""
    # optional extra (peft), seconds to import: only after a LoRA run
    import peft

    if importlib.util.find_spec("peft.utils.transformers_weight_conversion") is not None:
        return None
    return (f"note: AutoModelForCausalLM.from_pretrained on this adapter folder needs peft >= 0.19 (installed "
            f"{peft.__version__}): `pip install 'destila[peft]'` upgrades it; peft's AutoPeftModelForCausalLM loads "
            "it as it is" + (", and the merged copy is a plain model" if merged else
                             ", and --merge writes a plain copy"))


def _require_peft():
    try:
        import peft  # noqa: F401
    except ImportError as err:
        raise ValueError(
            "lora_r: LoRA students need the package peft, which is not installed; "
            "install it with `pip install 'destila[peft]'`"
        ) from err


@dataclass
class LoraArguments:
    """Options of a LoRA student (``lora_r = 0``: train every weight, no adapters)."""

    lora_r: int = field(default=0, metadata={"help": "LoRA rank; 0 trains the full student (no adapters)"})
    lora_alpha: float | None = field(
        default=None, metadata={"help": "LoRA scaling numerator (the update is alpha / r · B A); default 2·r"}
    )
    lora_dropout: float = field(default=0.0, metadata={"help": "dropout on the LoRA input"})
    lora_target_modules: str = field(
        default="all-linear",
        metadata={"help": "comma-separated module names to adapt (e.g. q_proj,v_proj), or all-linear "
                  "(every linear layer but the output head)"},
    )
    merge: bool = field(
        default=False, metadata={"help": "after training also write OUT/merged: a plain model with the adapters merged"}
    )

    def __post_init__(self):
        if self.lora_r < 0:
            raise ValueError(f"lora_r: expected a non-negative rank, found {self.lora_r}")
        if not self.enabled:
            if self.merge:
                raise ValueError("merge: there is nothing to merge without adapters; pass --lora-r R as well")
            return
        _require_peft()
        if self.lora_alpha is None:
            self.lora_alpha = 2.0 * self.lora_r
        if not self.lora_alpha > 0:
            raise ValueError(f"lora_alpha: expected a positive number, found {self.lora_alpha}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout: expected a number in [0, 1), found {self.lora_dropout}")
        targets = self.targets()
        if isinstance(targets, list) and "lm_head" in targets:
            raise ValueError(
                "lora_target_modules: lm_head cannot be adapted; the fused loss reads the output head's "
                "weight directly. Leave it out (all-linear already does)"
            )

    @property
    def enabled(self) -> bool:
        return self.lora_r > 0

    def targets(self) -> str | list[str]:
        names = [name.strip() for name in self.lora_target_modules.split(",") if name.strip()]
        if not names:
            raise ValueError("lora_target_modules: expected module names or all-linear, found nothing")
        return "all-linear" if names == ["all-linear"] else names


def base_reference(student) -> str | None:
    """What an adapter's ``base_model_name_or_path`` says of the student ``student`` was loaded from: the
    absolute path of a local folder (valid from any working folder), a hub id as is; None when unknown."""
    if not student:
        return None
    try:
        path, gguf = resolve_source(str(student))
    except (OSError, ValueError):
        return str(student)
    return str(Path(path).resolve()) if Path(path).exists() and gguf is None else str(student)


def with_adapters(model, options: LoraArguments, base: str | None = None):
    """``model`` wrapped as a PEFT model whose only trainable weights are the LoRA adapters; ``base`` (see
    :func:`base_reference`) is recorded as the adapter's base model."""
    # optional extra (peft), seconds to import: only for a LoRA student
    from peft import LoraConfig, get_peft_model

    check_targets(model, options.targets())
    config = LoraConfig(
        r=options.lora_r, lora_alpha=options.lora_alpha, lora_dropout=options.lora_dropout,
        target_modules=options.targets(), task_type="CAUSAL_LM",
    )
    try:
        adapted = get_peft_model(model, config)
    except ValueError as err:  # e.g. target modules that do not exist in this architecture
        raise ValueError(f"lora_target_modules: {err}") from err
    record_base(adapted, base)
    return adapted


def check_targets(model, targets) -> None:
    """Every target module name must match a module of ``model`` as PEFT matches them (the name itself, or its
    end after a dot): PEFT adapts the names that match and silently skips the others, as long as one matches."""
    if isinstance(targets, str):
        return  # all-linear
    names = [name for name, _ in model.named_modules()]
    missing = [target for target in targets
               if not any(name == target or name.endswith("." + target) for name in names)]
    if missing:
        import torch  # heavy: torch, already loaded with the model

        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, torch.nn.Linear)} - {"lm_head"})
        raise ValueError(f"lora_target_modules: {', '.join(missing)} matches no module of this "
                         f"{type(model).__name__}; its linear layers are {', '.join(linear)} (or give all-linear)")


def record_base(model, base: str | None) -> None:
    """Make ``base`` the base model every adapter config of the PEFT ``model`` names (kept when None)."""
    if base is not None:
        for config in getattr(model, "peft_config", {}).values():
            config.base_model_name_or_path = base


def merge_adapter(adapter_dir: str | Path, base: str | Path, out: str | Path | None = None) -> Path:
    """Write ``base`` + the adapter in ``adapter_dir`` merged into one plain model folder.

    Reloads both from disk rather than merging the training copy, so it works
    the same after any engine (DDP, FSDP) and never alters the saved adapter.
    The tokenizer of ``adapter_dir`` is copied alongside. Returns the folder.
    """
    # optional extra (peft), seconds to import: only when adapters are merged
    from peft import PeftModel
    from transformers import AutoTokenizer

    adapter_dir = Path(adapter_dir)
    out = Path(out) if out is not None else adapter_dir / MERGED_DIR
    merged = PeftModel.from_pretrained(load_causal_lm(str(base)), adapter_dir).merge_and_unload()
    merged.save_pretrained(out)
    try:
        AutoTokenizer.from_pretrained(adapter_dir).save_pretrained(out)
    except (OSError, ValueError):
        pass  # an adapter saved without a tokenizer: the merged model is still complete
    return out
