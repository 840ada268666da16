"""A run resumed at its end: nothing is trained again.

The Trainer, resumed from a checkpoint whose step is already the run's last
(``--max_steps``, or the steps its epochs make), trains one step more before
it checks that the run is over: the final model would then differ from an
uninterrupted run's, and a finished run would be trained past its end. So
``destila train --resume`` reads the checkpoint first:

- the checkpoint is at the run's end and the final model is saved (no
  ``.destila-save-incomplete`` flag, the weights and ``trainer_state.json``
  of that step beside it): the run is finished, nothing changes;
- at the end, but the final save did not complete (killed during it, or
  between the last checkpoint and it): the final model is saved from the
  checkpoint's weights, training no step;
- before the end (a larger ``--max_steps`` included): the Trainer resumes.

Naive equivalent::

    state = json.load(open(checkpoint / "trainer_state.json"))
    at_end = state["global_step"] >= (args.max_steps if args.max_steps > 0 else state["max_steps"])
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers.trainer_callback import TrainerState

from destila.models import SAVE_INCOMPLETE

STATE_FILE = "trainer_state.json"
_WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")


def end_step(checkpoint: str | Path | None, args) -> int | None:
    """The step of ``checkpoint`` when it is the run's last under ``args``, else None.

    The run's last step is ``args.max_steps`` when given; otherwise the
    checkpoint's own ``max_steps``, as long as ``num_train_epochs`` is the one
    it was trained with (more epochs: the run goes on).
    """
    if checkpoint is None:
        return None
    try:
        state = json.loads((Path(checkpoint) / STATE_FILE).read_text())
        step, recorded_last = int(state["global_step"]), int(state["max_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the Trainer's own loading says what is wrong with it
    if args.max_steps > 0:
        last = args.max_steps
    elif state.get("num_train_epochs") == args.num_train_epochs:
        last = recorded_last
    else:
        return None
    return step if step >= last else None


def final_model_saved(out: Path, step: int) -> bool:
    """Whether ``out`` holds the completed final save of step ``step``."""
    if (out / SAVE_INCOMPLETE).exists() or not any((out / name).is_file() for name in _WEIGHTS):
        return False
    try:
        return int(json.loads((out / STATE_FILE).read_text())["global_step"]) == step
    except (OSError, ValueError, KeyError, TypeError):
        return False


def restore_end(trainer, checkpoint: str | Path) -> None:
    """Give ``trainer`` the checkpoint's weights and state, as resuming does, without a training step."""
    # The Trainer's own loader, private: it knows every layout a checkpoint can have (full weights, sharded, an
    # adapter, FSDP and DeepSpeed states), and its public door (train) would train a step past the end.
    trainer._load_from_checkpoint(str(checkpoint))
    trainer.load_checkpoint_extras(checkpoint)
    trainer.state = TrainerState.load_from_json(str(Path(checkpoint) / STATE_FILE))
