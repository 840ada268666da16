"""The student a :class:`DistillationTrainer` trains, taken the ways TRL's trainers take it.

- ``model="path/or/hub-id"``: loaded with :func:`destila.models.load_causal_lm`,
  and its tokenizer becomes ``processing_class`` when none is given;
- ``peft_config=LoraConfig(...)`` (any PEFT config): the model wrapped with
  ``peft.get_peft_model``, as TRL does;
- ``args.lora_r > 0``: adapters from the LoRA fields of
  :class:`~destila.training.DistillationArguments`;
- ``args.freeze_embeddings``: the input embedding and the output head kept fixed;
- tied weights (a head that is the input embedding) declared as left out of
  checkpoints (:mod:`~destila.training.tied_weights`).

Naive equivalent::

    model = AutoModelForCausalLM.from_pretrained(model) if isinstance(model, str) else model
    model = get_peft_model(model, peft_config) if peft_config is not None else model
"""

from __future__ import annotations

from destila.models import load_causal_lm, load_tokenizer, output_head
from destila.training.peft_student import base_reference, record_base, with_adapters
from destila.training.tied_weights import declare_tied_unsaved


def _is_peft(model) -> bool:
    return type(model).__module__.startswith("peft.")


def student_model(model, args, kwargs: dict) -> tuple[object, dict]:
    """``(model, trainer kwargs)``: the student loaded and adapted; ``peft_config`` taken out of ``kwargs``."""
    kwargs = dict(kwargs)
    peft_config = kwargs.pop("peft_config", None)
    if model is None:
        raise ValueError("DistillationTrainer: model= is required (a model, or the path or hub id of one)")
    path = None
    if isinstance(model, str):
        path = model
        model = load_causal_lm(path)
        if kwargs.get("processing_class") is None:
            try:
                kwargs["processing_class"] = load_tokenizer(path)
            except (OSError, ValueError, TypeError):
                pass  # weights without a tokenizer: a cache brings its own
    if not _is_peft(model):  # a checkpoint leaves a tied head out: the Trainer's reload ties it, without a warning
        declare_tied_unsaved(model)
    if args.freeze_embeddings:  # before any adapter: the base model's own embedding and head
        model.get_input_embeddings().requires_grad_(False)
        output_head(model)[0].requires_grad_(False)
    lora = args.lora_arguments()
    if peft_config is not None and lora.enabled:
        raise ValueError(f"peft_config: given together with lora_r = {lora.lora_r}; give one of them")
    if peft_config is not None:
        if _is_peft(model):
            raise ValueError("peft_config: the model already has adapters; pass the base model, or drop peft_config")
        # optional extra (peft), seconds to import: only with a peft_config
        from peft import get_peft_model

        targets = getattr(peft_config, "target_modules", None) or ()
        if "lm_head" in (targets if not isinstance(targets, str) else [targets]):
            raise ValueError("peft_config: lm_head cannot be adapted; the fused loss reads the output head's "
                             "weight directly. Leave it out of target_modules")
        model = get_peft_model(model, peft_config)
        record_base(model, base_reference(path or getattr(model, "name_or_path", None)))
    elif lora.enabled and not _is_peft(model):
        model = with_adapters(model, lora, base=base_reference(path or getattr(model, "name_or_path", None)))
    return model, kwargs
