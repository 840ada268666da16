"""What a run trains towards, recorded with the run so ``--resume`` continues the same objective.

A resumed run restores weights, optimizer and sampler from its checkpoint,
but the loss options come from the command: ``--resume`` alone would
otherwise fall back to the defaults (forward KL, no hard term) and change the
objective mid-run without a word. So the run record (``destila_run.json``)
holds the options below; on ``--resume`` the command line takes them as its
defaults (:func:`recorded_defaults`), and :func:`check_resumed` refuses a
value given that differs from the recorded one, naming both.

Besides the loss, the record holds what else decides the run's trajectory
(learning-rate schedule, optimizer, batch size, seed) and what the run is
made of: the targets (cache folder, or teacher and data), the student and
the cache's content, so a cache rebuilt in place is refused as well.

Options that only change how the same numbers are computed (``impl``,
``chunk_size``, engines) are not part of the objective.

Local paths are recorded relative to the output folder (``../cache``), so the
record, which is uploaded with the run, names no folder above the ones the
run and its inputs share, and still finds them: a resume reads them back
anchored at the output folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from destila.data.spec import COLUMN_FIELDS
from destila.io.shareable import relative_to

# The loss (LossOptions, less the computation-only impl / chunk_size / ignore_index), K′, and the extra terms.
OBJECTIVE_FIELDS = ("divergence", "beta", "tail", "temperature", "soft_weight", "hard_weight", "top_k",
                    "online_loss", "hidden_loss", "hidden_weight", "layer_map", "eval_fraction", "freeze_embeddings",
                    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules",
                    # nucleus truncation and the distillation weight's schedule
                    "top_p", "soft_weight_schedule", "soft_weight_start", "soft_weight_warmup", "soft_weight_decay",
                    "soft_weight_end", "hard_weight_complement")
# Besides the loss, what decides the run's trajectory: recorded and defaulted on --resume like the loss.
TRAJECTORY_FIELDS = ("learning_rate", "lr_scheduler_type", "warmup_steps", "warmup_ratio", "weight_decay",
                     "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "optim",
                     "per_device_train_batch_size", "gradient_accumulation_steps", "seed")


def objective_of(args, *, cache=None, teacher=None, data=None, student=None, cache_content=None,
                 out=None) -> dict:
    """``{"options": {...}, "targets": {...}, "inputs": {...}}`` of a run: the objective and trajectory
    fields of ``args``; where the targets come from (the cache folder, or the teacher and the data spec),
    which ``--resume`` takes as defaults; and the inputs it only compares: the ``student`` (a local path,
    or a hub id) and ``cache_content`` (the cache's ids fingerprint). Local paths are relative to ``out``
    (absolute when ``out`` is None)."""
    targets = {"cache": _where(cache, out), "teacher": _where(teacher, out)}
    if data is not None:
        described = data.describe() if hasattr(data, "describe") else None  # a list of texts: not recorded
        if described is not None:
            # The spec as read (its format detected): the column fields of other formats are not read, and
            # recording their defaults (text_field "text" beside messages) would say another format.
            described = {name: value for name, value in described.items()
                         if name not in COLUMN_FIELDS or name in data.column_fields}
            described = {**described, "source": _where(described.get("source"), out)}
        targets["data"] = described
    plain = lambda value: getattr(value, "value", value)  # noqa: E731  (enums such as SchedulerType)
    options = {name: plain(getattr(args, name)) for name in OBJECTIVE_FIELDS + TRAJECTORY_FIELDS
               if hasattr(args, name)}
    inputs = {"student": _where(student, out), "cache_content": cache_content}
    return {"options": options, "targets": targets, "inputs": {k: v for k, v in inputs.items() if v is not None}}


def _where(path, out=None) -> str | None:
    """An input as recorded with a run: a local path relative to ``out`` (absolute without ``out``), or the
    name given (hub id, smollm2); a dataset given in Python by its description."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        return str(getattr(path, "path", None) or f"<{type(path).__name__}>")
    local = Path(str(path)).expanduser()
    if not local.exists():
        return str(path)
    return relative_to(local, out) if out is not None else str(local.resolve())


def _anchored(value, out):
    """A recorded path read back: relative to ``out`` (or absolute, as older records hold it) → absolute when it
    exists there; anything else as is."""
    if not isinstance(value, str) or out is None:
        return value
    local = Path(out) / Path(value).expanduser()  # an absolute value stays itself
    return str(local.resolve()) if local.exists() else value


_PATH_FIELDS = (("targets", "cache"), ("targets", "teacher"), ("inputs", "student"))


def _paths_anchored(objective: dict, out) -> dict:
    """``objective`` with its local paths absolute (see :func:`_anchored`), for comparing two records."""
    anchored = {part: dict(objective.get(part) or {}) for part in ("options", "targets", "inputs")}
    for part, name in _PATH_FIELDS:
        if name in anchored[part]:
            anchored[part][name] = _anchored(anchored[part][name], out)
    data = anchored["targets"].get("data")
    if isinstance(data, dict):
        anchored["targets"]["data"] = {**data, "source": _anchored(data.get("source"), out)}
    return anchored


def check_resumed(recorded: dict | None, current: dict, out) -> None:
    """Refuse to resume the run in ``out`` with another objective than the one it recorded."""
    if not recorded:
        return  # a run recorded before objectives were: nothing to compare
    recorded, current = _paths_anchored(recorded, out), _paths_anchored(current, out)
    differences = []
    for part in ("options", "targets", "inputs"):
        before, now = recorded.get(part) or {}, current.get(part) or {}
        for name in sorted(before.keys() & now.keys()):
            if _normal(before[name]) != _normal(now[name]):
                differences.append(f"{name} {before[name]!r} (recorded) vs {now[name]!r} (given)")
    if differences:
        raise ValueError(
            f"resume: the run in {out} was trained with other inputs or options: {'; '.join(differences)}. --resume "
            "re-reads the recorded options: drop the differing ones, give the run's own inputs, or start a new run "
            "with --overwrite or another -o"
        )


def _normal(value):
    """JSON turns tuples into lists and ints into floats where it may: compare what survives the record."""
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {k: _normal(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def recorded_defaults(record: dict | None, out=None) -> dict:
    """The command-line defaults a ``--resume`` takes from the run record: its options and its targets
    (``cache``, or ``teacher`` + ``data`` and the data fields), local paths anchored at the run's folder ``out``."""
    objective = _paths_anchored((record or {}).get("objective") or {}, out)
    defaults = dict(objective.get("options") or {})
    targets = dict(objective.get("targets") or {})
    data = targets.pop("data", None)
    defaults.update({k: v for k, v in targets.items() if v is not None})
    if isinstance(data, dict):
        defaults["data"] = data.get("source")
        defaults.update({k: v for k, v in data.items() if k != "source"})
    return defaults
