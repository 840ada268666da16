"""Hidden-state distillation in the trainer: online targets, the learned projection, checkpoints, refusals."""

import pytest
import torch
from conftest import pydoc_texts
from transformers import AutoModelForCausalLM

from destila.cli.main import main
from destila.student import StudentInitSpec, init_student
from destila.training import DistillationArguments, TrainSpec
from destila.training.run import train_student
from destila.training.trainer import DistillationTrainer
from destila.data import DataSpec, collate
from destila.training.hidden_distillation import HiddenDistillation, PROJECTION_FILE
from destila.targets.online import OnlineTeacher
from train_helpers import read_log


@pytest.fixture(scope="module")
def narrow_student(tiny_llama_dir, tmp_path_factory):
    """A fresh 2-layer student half as wide as the teacher: its layers need a projection."""
    path = tmp_path_factory.mktemp("narrow") / "student"
    init_student(StudentInitSpec(str(tiny_llama_dir), path, seed=2, config={
        "num_hidden_layers": 2, "hidden_size": 16, "intermediate_size": 32, "num_attention_heads": 2,
        "num_key_value_heads": 1}))
    return path


def args(out, **options):
    return DistillationArguments(output_dir=str(out), per_device_train_batch_size=4, logging_steps=1,
                                 report_to="none", seed=0, save_steps=2, **options)


def test_online_hidden_term_equals_the_naive_formula(tiny_llama_dir, tmp_path):
    """Equal widths (a student cut from the teacher): no projection, and the term is a plain MSE of
    transformers' own hidden_states for the pairs of the layer map."""
    student_path = tmp_path / "cut"
    init_student(StudentInitSpec(str(tiny_llama_dir), student_path, layers=3))
    student = AutoModelForCausalLM.from_pretrained(student_path)
    teacher = AutoModelForCausalLM.from_pretrained(tiny_llama_dir).eval()
    a = args(tmp_path / "out", hidden_loss="mse", hidden_weight=0.5, layer_map="s0:t0,s1:t2")
    trainer = DistillationTrainer(model=student, args=a, teacher_model=OnlineTeacher(teacher, "topk", a.target_spec()),
                                  data_collator=collate)
    assert isinstance(trainer.hidden, HiddenDistillation) and trainer.hidden.parameters() == []
    batch = collate([{"input_ids": torch.randint(1, 300, (16,))} for _ in range(2)])
    loss, stats = trainer._distill(student, batch)
    kd, _ = trainer._kd(student, trainer._targets(batch))
    s = student(input_ids=batch["input_ids"], output_hidden_states=True).hidden_states
    t = teacher(input_ids=batch["input_ids"], output_hidden_states=True).hidden_states
    keep = batch["labels"] != -100
    # hidden_states[i + 1] is layer i's output (the layers mapped here are not the last, which is normed).
    want = 0.5 * 0.5 * (((s[1] - t[1]) ** 2).mean(-1)[keep].mean() + ((s[2] - t[3]) ** 2).mean(-1)[keep].mean())
    assert torch.allclose(stats["hidden"], want, atol=1e-5)
    assert torch.allclose(loss, kd + stats["hidden"], atol=1e-6)


def test_online_hidden_training_with_a_projection_then_resume(tiny_llama_dir, narrow_student, tmp_path):
    out = tmp_path / "out"
    texts = pydoc_texts(4)
    common = dict(teacher=str(tiny_llama_dir), data=DataSpec(texts, seq_len=32, max_tokens=32 * 24))
    train_student(TrainSpec(str(narrow_student), out, args(out, max_steps=4, hidden_loss="cosine", online_loss="topk"),
                            **common))
    log = read_log(out / "log.jsonl")
    assert sorted(log) == [1, 2, 3, 4] and all(0 < r["hidden_loss"] < 2 for r in log.values())
    # The projection is checkpointed (for resume) but not part of the saved student.
    assert (out / "checkpoint-4" / PROJECTION_FILE).is_file() and not (out / PROJECTION_FILE).exists()
    saved = AutoModelForCausalLM.from_pretrained(out)
    fresh = AutoModelForCausalLM.from_pretrained(narrow_student)
    assert saved.state_dict().keys() == fresh.state_dict().keys()
    projection = torch.load(out / "checkpoint-4" / PROJECTION_FILE)
    assert [tuple(v.shape) for v in projection.values()] == [(32, 16), (32, 16)]
    # The optimizer trains it: it moved between the checkpoints of steps 2 and 4.
    earlier = torch.load(out / "checkpoint-2" / PROJECTION_FILE)
    assert all(not torch.equal(projection[k], earlier[k]) for k in projection)
    # Resume loads the projections from the checkpoint: without them it is refused, before any step.
    kept = (out / "checkpoint-4" / PROJECTION_FILE).read_bytes()
    (out / "checkpoint-4" / PROJECTION_FILE).unlink()
    with pytest.raises(ValueError, match="holds no hidden-state projections"):
        train_student(TrainSpec(str(narrow_student), out, args(out, max_steps=6, hidden_loss="cosine",
                                                               online_loss="topk"), resume=True, **common))
    assert sorted(read_log(out / "log.jsonl")) == [1, 2, 3, 4]
    (out / "checkpoint-4" / PROJECTION_FILE).write_bytes(kept)
    # Resume runs the remaining steps from the checkpoint, projections included.
    train_student(TrainSpec(str(narrow_student), out, args(out, max_steps=6, hidden_loss="cosine", online_loss="topk"),
                            resume=True, **common))
    assert sorted(read_log(out / "log.jsonl")) == [1, 2, 3, 4, 5, 6]


def test_hidden_loss_needs_a_cache_with_hidden_states(narrow_student, tiny_cache, tmp_path, capsys):  # noqa: F811
    with pytest.raises(SystemExit) as done:
        main(["train", str(narrow_student), "--cache", str(tiny_cache), "-o", str(tmp_path / "o"),
              "--hidden-loss", "mse", "--max_steps", "1"])
    assert done.value.code == 2
    assert "hold no teacher hidden states" in capsys.readouterr().err


def test_documented_online_command(tiny_llama_dir, tmp_path, monkeypatch):
    """docs/techniques.md's online hidden-state command, with a tiny teacher and tiny sizes."""
    monkeypatch.chdir(tmp_path)
    for command in (
        f"destila student init {tiny_llama_dir} -o student/ --layers 2",
        f"destila train student/ --teacher {tiny_llama_dir} --data pydoc -o hidden-out --online_loss topk "
        "--hidden_loss mse --hidden_weight 1.0 --layer_map auto --max_steps 2 --seq-len 32 --max-tokens 512",
    ):
        with pytest.raises(SystemExit) as done:
            main(command.split()[1:])
        assert done.value.code == 0, command
    assert all("hidden_loss" in r for r in read_log(tmp_path / "hidden-out" / "log.jsonl").values())
