"""Ready to share: the model card written with the saved student, and a push that fails at once without a Hub.

The card (``README.md`` beside the weights, what the Hub shows) says what
the student was distilled from and how: the teacher (its name and
fingerprints), the cache (targets, K or S, temperature, encoding, sequences)
or the online data, the data's fingerprints, the objective (divergence,
tail, temperature, weights, K′), the training schedule, and the held-out
figures of the final evaluation. It is built from the Trainer itself, so
``destila train``, :func:`~destila.training.train_student` and
``DistillationTrainer.push_to_hub`` (which calls ``create_model_card``) write
the same one. Local paths appear as their last component only
(:mod:`destila.io.shareable`). Naive equivalent::

    ModelCard(f"---\\n{metadata}\\n---\\n# {name}\\nDistilled from {teacher} ...").save(out / "README.md")
"""

from __future__ import annotations

import json
from pathlib import Path

from destila.cache.kinds import kind_of
from destila.io import write_atomic
from destila.io.markdown import table_lines
from destila.io.shareable import is_local_path, shareable_name
from destila.models import hub_unreachable
from destila.student.init import RECORD as STUDENT_RECORD  # what `destila student init` writes beside a student

CARD = "README.md"
# The Trainer's timing keys (eval_runtime, ...): how fast, not how good; left out of the figures shown.
SPEED_KEYS = ("runtime", "samples_per_second", "steps_per_second")


def check_push(args, asked: bool = False) -> None:
    """Refuse ``push_to_hub`` at once, in one line, when the Hub cannot be reached: the Trainer would otherwise
    fail while creating the repository (or after training, on the upload) with a long traceback. ``asked``: a
    push called for by name (``trainer.push_to_hub()``), whatever ``args.push_to_hub`` says."""
    if not (asked or getattr(args, "push_to_hub", False)):
        return
    reason = hub_unreachable()
    if reason is not None:
        raise ValueError(f"push_to_hub: the Hugging Face Hub cannot be reached ({reason}); train without "
                         "--push_to_hub, then upload the output folder once online (`hf upload NAME OUT`)")


def _cache_behind(dataset):
    """``(cache reader, aligned)``: the reader behind ``dataset`` (itself, the source of a Subset of it, or the
    cache that cross-tokenizer items were aligned from, then ``aligned``), else ``(None, False)``."""
    dataset = getattr(dataset, "source", dataset)
    aligned = getattr(dataset, "cache", None) is not None
    dataset = getattr(dataset, "cache", dataset)
    return (dataset, aligned) if hasattr(dataset, "manifest") else (None, False)


def _hub_id(name) -> str | None:
    """``name`` when it reads as a Hub model id (``org/name``) rather than a local path."""
    text = str(name or "")
    return text if text.count("/") == 1 and not is_local_path(text) else None


def _base_model(base) -> str | None:
    """The Hub id the student comes from: its own, or, for a local student that ``destila student init`` cut
    from a Hub model (its layers, its width), that model's. A fresh student (``--config``) has none."""
    if base is None or _hub_id(base) is not None:
        return _hub_id(base)
    record = Path(str(base)).expanduser() / STUDENT_RECORD
    try:
        made = json.loads(record.read_text())
    except (OSError, ValueError):
        return None  # a folder not made by `destila student init`
    return _hub_id(made.get("teacher")) if made.get("method") not in (None, "fresh") else None


def _data_names(trainer) -> tuple[list[str], str]:
    """``(Hub dataset ids, the held-out data's name)``: the cache (when given by its Hub id) and the data it or
    the online run read, as far as they are Hub datasets; the name is the first of them, else the cache's or the
    data's last path component."""
    cache, _ = _cache_behind(trainer.train_dataset)
    if cache is not None:
        given = [str(cache.path), cache.manifest.data_source]  # a cache opened by its Hub id has it as path
    else:
        data = getattr(trainer.train_dataset, "source", trainer.train_dataset)
        given = [getattr(getattr(data, "spec", None), "source", None)]
    given = [name for name in given if isinstance(name, str) and name]
    hub = list(dict.fromkeys(name for name in given if _hub_id(name)))
    return hub, (hub[0] if hub else str(shareable_name(given[0])) if given else "held-out data")


def _eval_results(trainer, dataset: str) -> list:
    """The last evaluation's figures as ``huggingface_hub.EvalResult`` entries (the card's ``model-index``)."""
    # huggingface_hub's card classes: only when a model card is written
    from huggingface_hub import EvalResult

    split = (f"{trainer.args.eval_fraction:g} of the training sequences, held out" if trainer.args.eval_fraction
             else "the evaluation set given to the run")
    return [EvalResult(task_type="text-generation", task_name="knowledge distillation", dataset_type=dataset,
                       dataset_name=dataset, dataset_split=split, metric_type=name, metric_name=f"eval_{name}",
                       metric_value=value)
            for name, value in _last_figures(trainer)[1]]


def _student_base(model) -> tuple[str | None, bool]:
    """``(name the student was loaded from, is a PEFT adapter)``."""
    configs = getattr(model, "peft_config", None)
    if configs:
        return next(iter(configs.values())).base_model_name_or_path, True
    return getattr(model, "name_or_path", None), False


def _sources(trainer) -> list[str]:
    """Lines on the teacher and the data: from the cache's manifest, or from the online teacher and data."""
    cache, across = _cache_behind(trainer.train_dataset)
    if cache is not None:
        m, targets = cache.manifest, cache.manifest.targets
        width = (f"top-{targets['top_k']} log-probs and the exact rest mass" if kind_of(targets["kind"]).has_logprobs
                 else f"{targets['samples']} draws per position")
        return [
            *(["- **Tokenizers**: the student's differs from the teacher's; the cache's targets were aligned to "
               "the student's tokens through their byte spans"] if across else []),
            f"- **Teacher**: {shareable_name(m.teacher)} ({m.teacher_architecture or 'architecture not recorded'}; "
            f"config hash `{m.teacher_config_hash or '-'}`, weights `{m.teacher_weight_fingerprint or '-'}`, "
            f"tokenizer `{m.tokenizer_fingerprint or '-'}`)",
            f"- **Cache**: {shareable_name(str(cache.path))}: {width} per trained position, temperature "
            f"{m.temperature:g}, {m.encoding} encoding, {m.sequences:,} sequences of {m.seq_len} tokens",
            f"- **Data**: {shareable_name(m.data_source)}; documents fingerprint `{m.data_fingerprint or '-'}`, "
            f"token sequences fingerprint `{m.ids_fingerprint or '-'}`",
        ]
    lines = []
    teacher = getattr(getattr(trainer, "teacher", None), "model", None)
    if teacher is not None:
        lines.append(f"- **Teacher** (online, run beside the student): "
                     f"{shareable_name(getattr(teacher, 'name_or_path', None) or type(teacher).__name__)}")
    data = getattr(trainer.train_dataset, "source", trainer.train_dataset)
    spec, store = getattr(data, "spec", None), getattr(data, "store", None)
    if spec is not None:
        lines.append(f"- **Data**: {shareable_name(spec.source)} ({spec.format}, loss on {spec.loss_on}, {spec.packing} "
                     f"packing, {spec.seq_len} tokens per row); documents fingerprint "
                     f"`{getattr(store, 'fingerprint', '-')}`, token sequences fingerprint "
                     f"`{getattr(data, 'fingerprint', '-')}`")
    return lines or ["- **Teacher and data**: not recorded (a dataset given in Python)"]


def _objective(args, model) -> list[str]:
    options = args.loss_options()
    divergence = options.divergence + (f" (β = {options.beta:g})" if options.divergence == "jsd" else "")
    lines = [f"- **Objective**: {divergence} over the teacher's entries with the `{options.tail}` rest, temperature "
             f"{options.temperature:g}, soft weight {options.soft_weight:g}, hard (cross-entropy) weight "
             f"{options.hard_weight:g}" + (f", K′ = {args.top_k}" if args.top_k is not None else "")]
    if getattr(args, "hidden_loss", None):
        lines.append(f"- **Hidden states**: {args.hidden_loss} loss, weight {args.hidden_weight:g}")
    for config in (getattr(model, "peft_config", None) or {}).values():
        modules = config.target_modules if isinstance(config.target_modules, str) else ",".join(
            sorted(config.target_modules or ()))
        lines.append(f"- **LoRA**: rank {config.r}, alpha {config.lora_alpha:g}, modules {modules}")
    return lines


def _schedule(trainer) -> str:
    args, state = trainer.args, trainer.state
    batch = args.per_device_train_batch_size * args.gradient_accumulation_steps * max(args.world_size, 1)
    scheduler = getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type)
    return (f"- **Training**: {state.global_step:,} optimizer steps of {batch} sequences, learning rate "
            f"{args.learning_rate:g} ({scheduler}), seed {args.seed}")


def _last_figures(trainer) -> tuple[dict | None, list[tuple[str, float]]]:
    """``(the last evaluation's log record, its figures as (name without eval_, value))``, or ``(None, [])``."""
    records = [r for r in trainer.state.log_history if any(k.startswith("eval_") for k in r)]
    if not records:
        return None, []
    return records[-1], [(key.removeprefix("eval_"), value) for key, value in records[-1].items()
                         if key.startswith("eval_") and isinstance(value, (int, float)) and not isinstance(value, bool)
                         and not key.endswith(SPEED_KEYS)]


def _held_out(trainer) -> list[str]:
    """The last evaluation's figures as a table, or a line saying there was none."""
    last, rows = _last_figures(trainer)
    if last is None:
        return ["No held-out evaluation was run (set `eval_fraction`, or give a held-out cache)."]
    where = (f"{trainer.args.eval_fraction:g} of the training sequences, held out"
             if trainer.args.eval_fraction else "the evaluation set given to the run")
    table = table_lines(["metric", "value"], [(name, f"{value:.4g}") for name, value in rows], "ll")
    return [f"At step {last.get('step', trainer.state.global_step)}, on {where}:", "", *table]


def model_card(trainer, model_name: str | None = None, merged: bool = False) -> str:
    """The card's text (YAML metadata, then markdown) for the student ``trainer`` trained (``merged``: for the
    copy with a LoRA student's adapters merged into its base)."""
    # huggingface_hub's card classes: only when a model card is written
    from huggingface_hub import ModelCardData

    model = trainer.accelerator.unwrap_model(trainer.model)
    base, adapter = _student_base(model)
    made = (f"the base student {shareable_name(base)}, as LoRA adapters"
            + (" merged into its weights" if merged else "") if adapter else shareable_name(base))
    adapter = adapter and not merged
    tags = ["destila", "knowledge-distillation", "distillation", *(["lora", "peft"] if adapter else [])]
    name = model_name or Path(trainer.args.output_dir).name
    datasets, held_out = _data_names(trainer)
    results = _eval_results(trainer, held_out)
    metadata = ModelCardData(library_name="peft" if adapter else "transformers", pipeline_tag="text-generation",
                             tags=tags, base_model=_base_model(base), datasets=datasets or None,
                             model_name=name if results else None, eval_results=results or None)
    load = (f"AutoPeftModelForCausalLM.from_pretrained(\"{name}\")  # from peft: the base student "
            f"({shareable_name(base)}) with this adapter" if adapter
            else f"AutoModelForCausalLM.from_pretrained(\"{name}\")  # from transformers")
    body = [
        f"# {name}", "",
        f"A student distilled with [destila](https://pypi.org/project/destila/) from {made}.",
        "", "## How it was made", "", *_sources(trainer), *_objective(trainer.args, model), _schedule(trainer),
        "", "## Held-out figures", "", *_held_out(trainer),
        "", "## Use", "", "```python", load, "```", "",
    ]
    return f"---\n{metadata.to_yaml()}\n---\n\n" + "\n".join(body)


def write_model_card(trainer, folder=None, model_name: str | None = None, merged: bool = False) -> Path:
    """Write :func:`model_card` as ``README.md`` in ``folder`` (default: the output folder); returns its path."""
    path = Path(folder or trainer.args.output_dir) / CARD
    write_atomic(path, model_card(trainer, model_name, merged).encode())
    return path
