"""What the teacher provides: the target spec, the chunked teacher head, the online teacher, and the
mixture of several teachers."""

from destila.targets.head import teacher_topk
from destila.targets.spec import TargetSpec, check_training_temperature

__all__ = ["TargetSpec", "check_training_temperature", "teacher_topk"]
