"""Training students: from a top-K cache (offline) or an online teacher (the baseline)."""

from destila.training.arguments import DistillationArguments
from destila.training.run import train_student
from destila.training.spec import TrainSpec
from destila.training.trainer import DistillationTrainer

__all__ = ["DistillationArguments", "DistillationTrainer", "TrainSpec", "train_student"]
