"""Making a student: a few evenly spaced layers cut from the teacher, or a fresh
smaller model of the teacher's architecture.

Cutting keeps the embeddings, the final norm and the output head, so the
student starts in the teacher's representation space and its first
distillation steps are spent repairing the missing layers, not relearning the
vocabulary. Both paths write an ordinary ``save_pretrained`` folder with the
teacher's tokenizer, loadable by plain ``transformers``.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
from pathlib import Path

from destila.locks import exclusive_lock
from destila.models import INIT_INCOMPLETE, load_causal_lm, load_tokenizer
from destila.permissions import readable_by_all

_LOCK = ".lock"  # the name cache build and train use too: one writer per folder, whichever command

# Where each supported family keeps its decoder layers in the state dict.
# Other families may well work, but they are refused until a test covers them.
LAYER_PREFIXES = {
    "llama": "model.layers",
    "mistral": "model.layers",
    "qwen2": "model.layers",
    "qwen3": "model.layers",
    "gpt2": "transformer.h",
}


def evenly_spaced_layers(total: int, keep: int) -> list[int]:
    """Indices of ``keep`` layers spread over ``range(total)``, first and last included.

    >>> evenly_spaced_layers(30, 6)
    [0, 6, 12, 17, 23, 29]
    """
    if not 1 <= keep <= total:
        raise ValueError(f"layers: expected an integer between 1 and the teacher's {total} layers, found {keep}")
    if keep == 1:
        return [total - 1]
    return [round(i * (total - 1) / (keep - 1)) for i in range(keep)]


def _supported_prefix(config) -> str:
    prefix = LAYER_PREFIXES.get(config.model_type)
    if prefix is None:
        raise ValueError(
            f"student init: model type {config.model_type!r} is not supported for layer cutting; "
            f"supported: {', '.join(sorted(LAYER_PREFIXES))}. Use --config to build a fresh student instead."
        )
    return prefix


def check_layer_indices(indices: list[int], total: int) -> list[int]:
    """``indices`` sorted, after checking they are distinct teacher layers in ``range(total)``."""
    kept = sorted(indices)
    if not kept or len(set(kept)) != len(kept) or kept[0] < 0 or kept[-1] >= total:
        raise ValueError(
            f"layers: expected distinct layer indices between 0 and {total - 1} (the teacher has {total} layers), "
            f"found {list(indices)}"
        )
    return kept


def cut_student(teacher, layers: int | None = None, indices: list[int] | None = None):
    """A new model with some of the teacher's decoder layers, all else copied.

    Give ``layers`` (that many, evenly spaced) or ``indices`` (exactly those
    teacher layers, e.g. ``[0, 1, ..., 7, 27, 28, 29]``: the first ones and the
    last ones, which on SmolLM2 keeps the student's starting perplexity far
    lower than an even spread; see docs/demo.md).

    Naive equivalent: ``copy.deepcopy(teacher)`` then delete the other layers
    from its ``ModuleList`` and fix ``num_hidden_layers`` (and any per-layer
    config lists such as ``layer_types``) to match.
    """
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
    return student, kept


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


def fresh_student(teacher, overrides: dict, seed: int = 0):
    """A randomly initialised model of the teacher's architecture with ``overrides`` applied to its config."""
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
        setattr(config, key, value)
    if config.vocab_size != teacher.config.vocab_size:
        raise ValueError(
            f"config: vocab_size must stay {teacher.config.vocab_size} (the teacher's tokenizer), "
            f"found {config.vocab_size}"
        )
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def init_student(
    teacher: str,
    out: str | Path,
    *,
    layers: int | None = None,
    layer_indices: list[int] | None = None,
    config_overrides: dict | None = None,
    gguf_file: str | None = None,
    seed: int = 0,
) -> dict:
    """Write a student folder (weights, config, tokenizer); return a summary dict.

    Exactly one of ``layers`` or ``layer_indices`` (cut from the teacher) or
    ``config_overrides`` (fresh model) must be given. Refuses to overwrite a
    non-empty folder.
    """
    cut = layers is not None or layer_indices is not None
    if layers is not None and layer_indices is not None:
        raise ValueError("student init: give either a number of layers or the layer indices, not both")
    if cut == (config_overrides is not None):
        raise ValueError("student init: give either --layers N (cut from the teacher) or --config (fresh model)")
    out = Path(out)
    with _claim(out):
        return _init_locked(teacher, out, layers, layer_indices, config_overrides, gguf_file, seed)


@contextlib.contextmanager
def _claim(out: Path):
    """Hold ``out``'s lock (a second init into it fails at once); a folder this call created and left empty goes."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"student init: {out} is a file; choose a new folder for the student")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
        lock = exclusive_lock(out / _LOCK, f"student init: another destila command is writing to {out}; wait for "
                              "it to finish, stop it, or choose another -o", remove_on_release=True)
    except OSError as err:
        raise OSError(err.errno, f"student init: cannot write the student folder {out}: {err.strerror or err}; "
                      "choose a folder you can write to") from err
    try:
        # Checked under the lock: another init may have filled the folder since. A lock file left by a
        # refused cache build is no content.
        if any(p.name != _LOCK for p in out.iterdir()) and not (out / INIT_INCOMPLETE).is_file():
            raise FileExistsError(f"student init: {out} exists and is not empty; choose a new folder")
        yield
    finally:
        lock.close()
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def _init_locked(teacher, out: Path, layers, layer_indices, config_overrides, gguf_file, seed) -> dict:
    cut = layers is not None or layer_indices is not None
    model = load_causal_lm(teacher, gguf_file=gguf_file)
    tokenizer = load_tokenizer(teacher, gguf_file=gguf_file)
    if cut:
        student, kept = cut_student(model, layers, layer_indices)
        summary = {"method": "cut", "kept_layers": kept}
    else:
        student = fresh_student(model, config_overrides, seed=seed)
        summary = {"method": "fresh", "overrides": config_overrides}
    _write_student(student, tokenizer, out)
    summary.update(
        out=str(out),
        teacher_parameters=sum(p.numel() for p in model.parameters()),
        student_parameters=sum(p.numel() for p in student.parameters()),
        teacher_layers=model.config.num_hidden_layers,
        student_layers=student.config.num_hidden_layers,
    )
    return summary


def _write_student(student, tokenizer, out: Path) -> None:
    """Save into ``out`` itself, flagged incomplete until the last byte is written.

    Staging inside the output folder keeps every temporary in a folder this
    command owns (a sibling temporary in the parent would land in a folder
    that may not be the user's, and errors would name it instead of ``out``).
    A rerun after a crash finds the flag, clears the folder and starts over.
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
        if (out / INIT_INCOMPLETE).is_file():
            for leftover in (p for p in out.iterdir() if p.name != _LOCK):  # ours, held
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        (out / INIT_INCOMPLETE).write_text("written by `destila student init`; removed when the folder is complete\n")
        student.save_pretrained(out)
        tokenizer.save_pretrained(out)
        readable_by_all(out)
        (out / INIT_INCOMPLETE).unlink()
    except OSError as err:
        raise OSError(
            err.errno, f"student init: cannot write the student folder {out}: {err.strerror or err}; "
            "choose a folder you can write to (a rerun clears what was written)"
        ) from err
