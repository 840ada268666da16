import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from destila.training import DistillationArguments, TrainSpec, train_student
from destila.data import next_token_labels
from destila.training.datasets import split_indices
from train_helpers import read_log


def args_for(out, **overrides):
    options = dict(
        output_dir=str(out), max_steps=12, per_device_train_batch_size=4, learning_rate=3e-3,
        logging_steps=1, save_strategy="no", report_to="none", use_cpu=True, seed=7,
        lr_scheduler_type="constant", dataloader_num_workers=0,
    )
    options.update(overrides)
    return DistillationArguments(**options)


def test_labels_are_next_tokens_and_split_is_stable():
    ids = torch.tensor([[5, 6, 7, 8]])
    assert next_token_labels(ids).tolist() == [[6, 7, 8, -100]]
    train, held = split_indices(50, 0.2)
    assert len(held) == 10 and not set(train) & set(held) and sorted(train + held) == list(range(50))
    assert split_indices(50, 0.2) == (train, held)  # independent of any global seed


def test_kl_to_teacher_falls_and_student_reloads(tiny_cache, fresh_student, tmp_path):
    out = tmp_path / "out"
    args = args_for(out, max_steps=30, eval_fraction=0.2, eval_strategy="steps", eval_steps=30, eval_on_start=True,
                    hard_weight=0.0)  # the KL alone, whose fall is measured
    result = train_student(TrainSpec(str(fresh_student), out, args, cache=tiny_cache))
    records = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval_kl" in r]
    assert len(evals) >= 2
    assert evals[-1]["eval_kl"] < 0.7 * evals[0]["eval_kl"], evals
    assert result["eval"]["eval_kl"] == pytest.approx(evals[-1]["eval_kl"])
    assert math.isclose(result["eval"]["eval_ppl"], math.exp(result["eval"]["eval_ce"]), rel_tol=1e-9)
    # The output folder is an ordinary HF model + tokenizer that can generate.
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    prompt = tokenizer("def main():", return_tensors="pt")
    generated = model.generate(**prompt, max_new_tokens=5, do_sample=False, pad_token_id=tokenizer.eos_token_id)
    assert generated.shape[1] == prompt.input_ids.shape[1] + 5


def train_and_log(student, cache, out, **overrides) -> dict[int, dict]:
    train_student(TrainSpec(str(student), out, args_for(out, **overrides), cache=cache))
    return read_log(out / "log.jsonl")


@pytest.mark.parametrize("impl", ["chunked", "dense"])
def test_loss_implementations_train_identically(tiny_cache, fresh_student, tmp_path, impl):
    fused = train_and_log(fresh_student, tiny_cache, tmp_path / "f", max_steps=4)
    other = train_and_log(fresh_student, tiny_cache, tmp_path / "o", max_steps=4, impl=impl)
    for step in range(1, 5):
        assert other[step]["loss"] == pytest.approx(fused[step]["loss"], rel=1e-4)
    # Each run's log says which way its loss ran, after its first step.
    for folder, start in ((tmp_path / "f", "fused, precision exact"), (tmp_path / "o", impl)):
        paths = [r for r in map(json.loads, (folder / "log.jsonl").read_text().splitlines()) if "loss_path" in r]
        assert len(paths) == 1 and paths[0]["step"] == 1 and paths[0]["loss_path"].startswith(start), paths


def test_accumulation_is_exact(tiny_cache, fresh_student, tmp_path):
    """micro-batch 1 × accumulation 4 == micro-batch 4 × accumulation 1 (same rows, same normalisation)."""
    common = dict(max_steps=3, optim="sgd", learning_rate=0.5, hard_weight=0.5)
    a, b = tmp_path / "a", tmp_path / "b"
    log_a = train_and_log(fresh_student, tiny_cache, a, per_device_train_batch_size=4, **common)
    log_b = train_and_log(fresh_student, tiny_cache, b, per_device_train_batch_size=1, gradient_accumulation_steps=4,
                          **common)
    for step in (1, 2, 3):
        assert log_b[step]["loss"] == pytest.approx(log_a[step]["loss"], rel=1e-5)
    weights_a = AutoModelForCausalLM.from_pretrained(a).state_dict()
    weights_b = AutoModelForCausalLM.from_pretrained(b).state_dict()
    start = AutoModelForCausalLM.from_pretrained(fresh_student).state_dict()
    for key in weights_a:
        moved = (weights_a[key] - start[key]).abs().max()
        torch.testing.assert_close(weights_b[key], weights_a[key], rtol=0, atol=1e-5 * max(1.0, moved.item()))
    assert any((weights_a[k] - start[k]).abs().max() > 1e-3 for k in weights_a)  # the steps did move the weights


def test_vocabulary_and_context_mismatches_are_refused(tiny_cache, tiny_llama_dir, tmp_path):
    from destila.student import StudentInitSpec, init_student

    wide = tmp_path / "wide"
    init_student(StudentInitSpec(str(tiny_llama_dir), wide, config={"num_hidden_layers": 1}))
    model = AutoModelForCausalLM.from_pretrained(wide)
    model.resize_token_embeddings(model.config.vocab_size + 8)
    model.save_pretrained(wide)
    with pytest.raises(ValueError, match=r"output head has \d+ rows but the cache's vocabulary has \d+ tokens"):
        train_student(TrainSpec(str(wide), tmp_path / "o1", args_for(tmp_path / "o1"), cache=tiny_cache))
    short = tmp_path / "short"
    init_student(StudentInitSpec(str(tiny_llama_dir), short, config={"num_hidden_layers": 1, "max_position_embeddings": 16}))
    with pytest.raises(ValueError, match="sequences have 32 tokens but the student's context is 16"):
        train_student(TrainSpec(str(short), tmp_path / "o2", args_for(tmp_path / "o2"), cache=tiny_cache))


def test_tokenizer_mismatch_needs_the_flag(tiny_cache, fresh_student, tmp_path):
    import shutil

    from transformers import AutoTokenizer

    other = tmp_path / "other"
    shutil.copytree(fresh_student, other)
    tokenizer = AutoTokenizer.from_pretrained(other)
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|new|>"]})  # same size head, other tokenizer
    tokenizer.save_pretrained(other)
    with pytest.raises(ValueError, match="tokenizer .* differs from the cache's"):
        train_student(TrainSpec(str(other), tmp_path / "o", args_for(tmp_path / "o"), cache=tiny_cache))
    args = args_for(tmp_path / "o", max_steps=1, allow_tokenizer_mismatch=True)
    train_student(TrainSpec(str(other), tmp_path / "o", args, cache=tiny_cache))
