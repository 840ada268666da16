"""What a run trains towards, recorded with the run so ``--resume`` continues the same objective.

A resumed run restores weights, optimizer and sampler from its checkpoint,
but the loss options come from the command: ``--resume`` alone would
otherwise fall back to the defaults (forward KL, no hard term) and change the
objective mid-run without a word. So the run record (``destila_run.json``)
holds the options below; on ``--resume`` the command line takes them as its
defaults (:func:`recorded_defaults`), and :func:`check_resumed` refuses a
value given that differs from the recorded one, naming both.

Options that only change how the same numbers are computed (``impl``,
``chunk_size``, batch sizes, engines) are not part of the objective.
"""

from __future__ import annotations

from pathlib import Path

# The loss (LossOptions, less the computation-only impl / chunk_size / ignore_index), K′, and the extra terms.
OBJECTIVE_FIELDS = ("divergence", "beta", "tail", "temperature", "soft_weight", "hard_weight", "top_k",
                    "online_loss", "hidden_loss", "hidden_weight", "layer_map", "eval_fraction", "freeze_embeddings",
                    "lora_r", "lora_alpha", "lora_dropout", "lora_target_modules")


def objective_of(args, *, cache=None, teacher=None, data=None) -> dict:
    """``{"options": {...}, "targets": {...}}`` of a run: the objective fields of ``args`` and where the
    targets come from (the cache folder, or the teacher and the data spec)."""
    targets = {"cache": str(Path(cache).resolve()) if cache is not None else None,
               "teacher": str(teacher) if teacher is not None else None}
    if data is not None:
        targets["data"] = data.describe() if hasattr(data, "describe") else None  # a list of texts: not recorded
    return {"options": {name: getattr(args, name) for name in OBJECTIVE_FIELDS}, "targets": targets}


def check_resumed(recorded: dict | None, current: dict, out) -> None:
    """Refuse to resume the run in ``out`` with another objective than the one it recorded."""
    if not recorded:
        return  # a run recorded before objectives were: nothing to compare
    differences = []
    for part in ("options", "targets"):
        before, now = recorded.get(part) or {}, current.get(part) or {}
        for name in sorted(before.keys() & now.keys()):
            if _normal(before[name]) != _normal(now[name]):
                differences.append(f"{name} {before[name]!r} (recorded) vs {now[name]!r} (given)")
    if differences:
        raise ValueError(
            f"resume: the run in {out} was trained with other options: {'; '.join(differences)}. --resume re-reads "
            "the recorded ones: drop the differing options, or start a new run with --overwrite or another -o"
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


def recorded_defaults(record: dict | None) -> dict:
    """The command-line defaults a ``--resume`` takes from the run record: its options and its targets
    (``cache``, or ``teacher`` + ``data`` and the data fields)."""
    objective = (record or {}).get("objective") or {}
    defaults = dict(objective.get("options") or {})
    targets = dict(objective.get("targets") or {})
    data = targets.pop("data", None)
    defaults.update({k: v for k, v in targets.items() if v is not None})
    if isinstance(data, dict):
        defaults["data"] = data.get("source")
        defaults.update({k: v for k, v in data.items() if k != "source"})
    return defaults
