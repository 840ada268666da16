"""Training students: from a top-K cache (offline) or an online teacher (the baseline).

The public names are imported on first use (:pep:`562`): they import transformers and torch, which take
seconds, while the light modules of this package (the TRL key table, the argument ranges, the reader of
``TrainingArguments``' source) serve ``destila train``'s answers before either is imported.
"""

from importlib import import_module

_HOMES = {
    "DistillationArguments": "destila.training.arguments",
    "DistillationTrainer": "destila.training.trainer",
    "TrainSpec": "destila.training.spec",
    "train_student": "destila.training.run",
}

__all__ = ["DistillationArguments", "DistillationTrainer", "TrainSpec", "train_student"]


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(_HOMES[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
