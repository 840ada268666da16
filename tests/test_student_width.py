"""Width pruning: exact when only dead units go, the kept units are the live ones, the result loads and trains.

"Dead" units are made by hand in tiny random teachers: MLP neurons whose
``down_proj`` column is zero, a key/value group whose heads' ``o_proj``
columns are zero, hidden channels that every RMSNorm multiplies by zero.
Pruning exactly those must leave the model's logits unchanged (neurons,
heads) or keep exactly the other channels.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from destila.cli.main import main as cli
from destila.student.calibration import from_texts
from destila.student.width import prune_width, resolve_targets
from destila.training.output_dir import read_log_records
from student_models import FAMILIES, make_teacher, save_teacher


def calibration_of(tokenizer, tokens=128):
    from destila.data import pydoc_texts

    return from_texts(pydoc_texts()[:20], tokenizer, tokens=tokens, seq_len=32)


def logits_of(model, ids):
    with torch.no_grad():
        return model(ids, use_cache=False).logits


@pytest.mark.parametrize("family", FAMILIES)
def test_keeping_every_unit_reproduces_the_teacher(family, tiny_tokenizer):
    teacher = make_teacher(family, len(tiny_tokenizer), layers=3)
    student, record = prune_width(teacher, calibration_of(tiny_tokenizer), hidden_size=32)
    assert record["hidden_size"] == 32 and record["num_key_value_heads"] == 2
    ids = torch.randint(0, len(tiny_tokenizer), (2, 20))
    torch.testing.assert_close(logits_of(student, ids), logits_of(teacher, ids))


@pytest.mark.parametrize("family", FAMILIES)
def test_dead_neurons_and_heads_are_the_ones_pruned(family, tiny_tokenizer):
    teacher = make_teacher(family, len(tiny_tokenizer), layers=3)
    dead_neurons = torch.arange(0, 64, 2)  # every other neuron
    with torch.no_grad():
        for layer in teacher.model.layers:
            layer.mlp.down_proj.weight[:, dead_neurons] = 0
            layer.self_attn.o_proj.weight[:, 16:] = 0  # heads 2 and 3: the second key/value group (head_dim 8)
    student, record = prune_width(teacher, calibration_of(tiny_tokenizer), intermediate_size=32,
                                  num_attention_heads=2, num_key_value_heads=1)
    assert record["kept_query_heads"] == [[0, 1]] * 3 and record["kept_key_value_heads"] == [[0]] * 3
    config = student.config
    assert (config.intermediate_size, config.num_attention_heads, config.num_key_value_heads, config.head_dim) == \
        (32, 2, 1, 8)
    ids = torch.randint(0, len(tiny_tokenizer), (2, 20))
    torch.testing.assert_close(logits_of(student, ids), logits_of(teacher, ids), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
def test_channels_every_norm_silences_are_dropped(family, tiny_tokenizer):
    teacher = make_teacher(family, len(tiny_tokenizer), layers=2)
    silent = [3, 7, 11, 20, 21, 30, 31, 0]
    with torch.no_grad():
        for name, module in teacher.named_modules():
            if name.endswith(("input_layernorm", "post_attention_layernorm")) or name == "model.norm":
                module.weight[silent] = 0
    student, _ = prune_width(teacher, calibration_of(tiny_tokenizer), hidden_size=32 - len(silent))
    live = [c for c in range(32) if c not in silent]
    torch.testing.assert_close(student.get_input_embeddings().weight, teacher.get_input_embeddings().weight[:, live],
                               rtol=0, atol=0)


@pytest.mark.parametrize("targets, message", [
    (dict(hidden_size=64), "--hidden-size: expected at most the teacher's 32 (pruning only narrows), found 64"),
    (dict(intermediate_size=0), "--intermediate-size: expected a positive integer, found 0"),
    (dict(num_attention_heads=3), "--num-attention-heads 3 is not a multiple of --num-key-value-heads 2"),
    (dict(num_attention_heads=4, num_key_value_heads=1), "each key/value head would serve 4 query heads"),
    (dict(num_key_value_heads=3), "--num-key-value-heads: expected at most the teacher's 2"),
    (dict(hidden_size=30), "a llama config refuses these sizes (The hidden size (30) is not a multiple of the number "
                           "of attention heads (4).); choose sizes it accepts"),
])
def test_impossible_sizes_are_refused(targets, message):
    from student_models import tiny_config

    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        resolve_targets(tiny_config("llama", 320), **targets)
    # What the defaults fill in: the teacher's key/value heads when they divide, else each keeps its share.
    assert resolve_targets(tiny_config("llama", 320), num_attention_heads=2)["num_key_value_heads"] == 2
    assert resolve_targets(tiny_config("llama", 320), num_key_value_heads=1)["num_attention_heads"] == 2


@pytest.fixture(scope="module", params=FAMILIES)
def teacher_and_cache(request, tmp_path_factory, tiny_tokenizer):
    from conftest import TRAIN_SEQ_LEN, pydoc_texts

    from destila.cache import build_cache

    folder = tmp_path_factory.mktemp(f"width-{request.param}")
    teacher = save_teacher(folder / "teacher", tiny_tokenizer, request.param, layers=4)
    build_cache(str(teacher), pydoc_texts(2), folder / "cache", seq_len=TRAIN_SEQ_LEN, top_k=8, progress=False)
    return teacher, folder / "cache"


def test_cli_cut_and_prune_loads_and_trains(teacher_and_cache, tmp_path, capsys):
    teacher, cache = teacher_and_cache
    out = tmp_path / "student"
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(teacher), "-o", str(out), "--layers", "0-1,3", "--hidden-size", "24",
             "--intermediate-size", "40", "--num-attention-heads", "2", "--cache", str(cache)])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "width: hidden_size 24, intermediate_size 40, num_attention_heads 2, num_key_value_heads 2, head_dim 8" \
        in printed
    student = AutoModelForCausalLM.from_pretrained(out)
    config = student.config
    assert (config.num_hidden_layers, config.hidden_size, config.head_dim) == (3, 24, 8)
    assert student.model.layers[0].self_attn.q_proj.weight.shape == (16, 24)
    record = json.loads((out / "destila_student.json").read_text())
    assert record["method"] == "cut+width" and len(record["width"]["kept_query_heads"]) == 3
    assert record["student_parameters"] == sum(p.numel() for p in student.parameters())
    with pytest.raises(SystemExit) as done:
        cli(["train", str(out), "--cache", str(cache), "-o", str(tmp_path / "trained"), "--max_steps", "2",
             "--per_device_train_batch_size", "4"])
    assert done.value.code == 0
    assert read_log_records(tmp_path / "trained" / "log.jsonl")


@pytest.mark.parametrize("argv, message", [
    (["--hidden-size", "16"], "--hidden-size: width pruning keeps the channels and heads that matter on calibration"),
    (["--hidden-size", "64", "--data", "pydoc"], "expected at most the teacher's 32"),
    (["--num-attention-heads", "3", "--data", "pydoc"], "is not a multiple of --num-key-value-heads 2"),
    (["--select", "importance", "--hidden-size", "16", "--data", "pydoc"], "--select importance: chooses which layers"),
])
def test_width_bad_input_is_one_line(argv, message, tiny_llama_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(tiny_llama_dir), "-o", str(tmp_path / "s"), *argv])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and message in err.splitlines()[-1]
    assert sum("error" in line for line in err.splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_width_pruning_refuses_gpt2(tiny_gpt2_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(tiny_gpt2_dir), "-o", str(tmp_path / "s"), "--hidden-size", "16", "--data", "pydoc"])
    assert done.value.code == 2
    assert "width pruning supports llama, mistral, qwen2, qwen3, found model type 'gpt2'" in capsys.readouterr().err
