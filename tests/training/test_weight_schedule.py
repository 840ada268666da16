"""The distillation weight's schedule: ramp and warmup-stable-decay, with the cross-entropy as its complement."""

import pytest
from conftest import TRAIN_SEQ_LEN, pydoc_texts
from test_train import args_for
from train_helpers import read_log

from destila.cache import build_cache
from destila.training import DistillationArguments, train_student
from destila.training.weight_schedule import SoftWeightSchedule


def test_ramp_and_wsd_values():
    ramp = SoftWeightSchedule("ramp", soft_weight_start=0.0, soft_weight_warmup=0.25)
    assert [ramp.soft(0.9, step, 8) for step in range(4)] == pytest.approx([0.0, 0.45, 0.9, 0.9])
    wsd = SoftWeightSchedule("wsd", soft_weight_start=0.2, soft_weight_warmup=2, soft_weight_decay=0.5,
                             soft_weight_end=0.0)
    # warm-up over 2 steps from 0.2, hold 1.0, then the last 4 of 8 steps move to 0.
    assert [wsd.soft(1.0, step, 8) for step in range(8)] == pytest.approx([0.2, 0.6, 1.0, 1.0, 1.0, 0.75, 0.5, 0.25])
    assert SoftWeightSchedule().weights(0.9, 0.1, 3, 10) == {}  # constant: the loss options' own weights
    complement = SoftWeightSchedule("ramp", soft_weight_warmup=4, hard_weight_complement=True)
    assert complement.weights(0.9, 0.0, 2, 10) == pytest.approx({"soft_weight": 0.45, "hard_weight": 0.55})


def test_schedules_that_cannot_work_are_refused(tmp_path):
    out = str(tmp_path / "o")
    with pytest.raises(ValueError, match="soft_weight_schedule: expected one of constant, ramp, wsd"):
        DistillationArguments(output_dir=out, soft_weight_schedule="cosine")
    with pytest.raises(ValueError, match="α must stay ≤ 1"):
        DistillationArguments(output_dir=out, soft_weight=2.0, soft_weight_schedule="ramp",
                              hard_weight_complement=True)
    with pytest.raises(ValueError, match="with --hard_weight 0 the loss is zero"):
        DistillationArguments(output_dir=out, soft_weight_schedule="ramp", hard_weight=0.0)  # starts at 0, no CE
    with pytest.raises(ValueError, match="soft_weight_warmup: expected a finite number ≥ 0"):
        DistillationArguments(output_dir=out, soft_weight_schedule="ramp", hard_weight=1.0, soft_weight_warmup=-1)


@pytest.fixture(scope="module")
def cache(tiny_llama_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("schedule") / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(3), path, seq_len=TRAIN_SEQ_LEN, top_k=16, progress=False)
    return path


def test_each_step_trains_the_scheduled_mix(cache, fresh_student, tmp_path):
    """With the weights frozen (learning rate 0), each step's loss is α(t)·KL + (1 − α(t))·CE of that step."""
    out = tmp_path / "ramp"
    args = args_for(out, max_steps=6, learning_rate=0.0, soft_weight=0.9, soft_weight_schedule="wsd",
                    soft_weight_warmup=3, soft_weight_decay=2, soft_weight_end=0.3, hard_weight_complement=True)
    train_student(str(fresh_student), out, args, cache=cache)
    log = read_log(out / "log.jsonl")
    alphas = [0.0, 0.3, 0.6, 0.9, 0.9, 0.6]  # ramp over 3 steps, hold, the last 2 steps from 0.9 towards 0.3
    for step, alpha in enumerate(alphas, start=1):
        record = log[step]
        assert record["soft_weight"] == pytest.approx(alpha)
        assert record["hard_weight"] == pytest.approx(1 - alpha)
        assert record["loss"] == pytest.approx(alpha * record["kl"] + (1 - alpha) * record["ce"], rel=1e-4)


def test_the_held_out_objective_carries_the_scheduled_weights(tiny_cache, fresh_student, tmp_path):
    """At step 0 of a ramp from 0.3 (4 steps, CE its complement), `eval_loss` is 0.3·KL + 0.7·CE, not the
    constant weights' loss (which, at α = 1 and no CE, would be the yardstick KL itself)."""
    from test_eval_objective import oracle, trainer_for

    trainer = trainer_for(tiny_cache, fresh_student, tmp_path / "s", soft_weight=1.0, soft_weight_schedule="ramp",
                          soft_weight_start=0.3, soft_weight_warmup=4, hard_weight_complement=True,
                          hard_weight=1.0)  # train's default: the complement replaces it (another is refused)
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(oracle(trainer, tiny_cache, soft_weight=0.3, hard_weight=0.7),
                                                 rel=1e-5)
    assert metrics["eval_kl"] == pytest.approx(oracle(trainer, tiny_cache), rel=1e-5)
    assert abs(metrics["eval_loss"] - metrics["eval_kl"]) > 1e-3


@pytest.mark.parametrize("schedule,options,named", [
    ("constant", {"soft_weight_start": 0.2}, "soft_weight_start 0.2"),
    ("constant", {"soft_weight_warmup": 50}, "soft_weight_warmup 50"),
    ("ramp", {"soft_weight_end": 0.5}, "soft_weight_end 0.5"),
    ("ramp", {"soft_weight_decay": 10}, "soft_weight_decay 10"),
])
def test_a_schedule_field_the_schedule_never_reads_is_refused(schedule, options, named):
    """Accepted and ignored before: e.g. --soft_weight_start with the constant schedule."""
    with pytest.raises(ValueError, match=f"{named}: read only by the .* schedule, and soft_weight_schedule is "
                                         f"{schedule}"):
        DistillationArguments(output_dir="out", soft_weight_schedule=schedule, **options)
    DistillationArguments(output_dir="out", soft_weight_schedule="wsd", **options)  # wsd reads every one


def test_an_explicit_hard_weight_beside_its_complement_is_refused():
    """The complement replaced a given --hard_weight without a word."""
    with pytest.raises(ValueError, match="hard_weight 0.3 and hard_weight_complement: the complement replaces it"):
        DistillationArguments(output_dir="out", hard_weight=0.3, hard_weight_complement=True, soft_weight=0.5)
    DistillationArguments(output_dir="out", hard_weight_complement=True, soft_weight=0.5)  # the default: fine


def test_a_ramp_longer_than_the_run_warns_that_the_weight_is_never_reached():
    ramp = SoftWeightSchedule(soft_weight_schedule="ramp", soft_weight_warmup=10)
    note = ramp.shortfall(0.9, max_steps=4)
    assert note.startswith("train: warning: the distillation weight never reaches soft_weight 0.9 in 4 steps")
    assert "at most 0.27" in note  # α(3) = 0.9 · 3/10
    assert ramp.shortfall(0.9, max_steps=11) is None  # reached at step 10
    assert SoftWeightSchedule().shortfall(0.9, max_steps=1) is None  # constant: nothing to reach


def test_the_warning_is_printed_once_when_training_starts(tiny_cache, fresh_student, tmp_path, capsys):
    args = args_for(tmp_path / "s", max_steps=2, soft_weight_schedule="ramp", soft_weight_warmup=10,
                    hard_weight=1.0)
    train_student(str(fresh_student), tmp_path / "s", args, cache=str(tiny_cache))
    printed = capsys.readouterr().out
    assert printed.count("never reaches soft_weight 1 in 2 steps") == 1
