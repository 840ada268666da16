"""Students by measurement: layer lists, importance scores against a naive oracle, selections, refusals.

Teachers are tiny random Llama, Qwen2 (sliding-window ``layer_types``) and
Qwen3 models built in code. To give the measurements a known answer, some
teachers have "identity" layers: their attention and MLP output projections
are zero, so the layer passes its input through unchanged and removing it
changes nothing.
"""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from destila.cli.main import main as cli
from destila.student import StudentInitSpec, cut_student, init_student, layer_scores, parse_layer_list, parse_layers
from destila.student.importance import greedy_cut
from destila.student.calibration import from_texts
from destila.training.output_dir import read_log_records
from student_models import FAMILIES, make_teacher, save_teacher


@pytest.fixture(scope="module", params=FAMILIES)
def identity_teacher(request, tmp_path_factory, tiny_tokenizer):
    """A 6-layer teacher of each family whose layers 2 and 3 pass their input through."""
    path = tmp_path_factory.mktemp(f"identity-{request.param}")
    return save_teacher(path, tiny_tokenizer, request.param, identity=(2, 3))


@pytest.fixture(scope="module")
def identity_cache(identity_teacher, tmp_path_factory):
    """A small cache of the teacher itself (the Qwen families load the tiny tokenizer as their own class)."""
    from conftest import TRAIN_SEQ_LEN, pydoc_texts

    from destila.cache import build_cache

    path = tmp_path_factory.mktemp("identity-cache") / "cache"
    build_cache(str(identity_teacher), pydoc_texts(2), path, seq_len=TRAIN_SEQ_LEN, top_k=8, progress=False)
    return path


def calibration_of(tokenizer, tokens=192, seq_len=32):
    from destila.data import pydoc_texts

    return from_texts(pydoc_texts()[:20], tokenizer, tokens=tokens, seq_len=seq_len)


def test_layer_lists_and_counts():
    assert parse_layers("6") == 6
    assert parse_layers("0-7,27-29") == [0, 1, 2, 3, 4, 5, 6, 7, 27, 28, 29]
    assert parse_layers("3,5") == [3, 5]
    with pytest.raises(ValueError, match="expected teacher layer indices like 0-7,27-29, found '7-3'"):
        parse_layer_list("7-3")
    with pytest.raises(ValueError, match="found 'a-b'"):
        parse_layers("a-b")


def four_layer_teacher(family: str, tokenizer):
    """A random 4-layer teacher of ``family`` (GPT-2: its layer 0 reads embeddings plus positions, the other path)."""
    if family == "gpt2":
        from conftest import make_tiny_model

        return make_tiny_model("gpt2", len(tokenizer))
    return make_teacher(family, len(tokenizer), layers=4)


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_scores_match_a_naive_cut_teacher(family, tiny_tokenizer):
    """skip-KL of layer l = KL(teacher ‖ the teacher cut without l); block influence = 1 - cos(h_l, h_{l+1})."""
    teacher = four_layer_teacher(family, tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer, tokens=96)
    scores = layer_scores(teacher, calibration)
    ids, mask = calibration.input_ids, calibration.scored
    with torch.no_grad():
        out = teacher(ids, output_hidden_states=True)
        reference = torch.log_softmax(out.logits.double(), -1)[mask]
        for layer in range(4):
            cut, _ = cut_student(teacher, indices=[i for i in range(4) if i != layer])
            other = torch.log_softmax(cut(ids).logits.double(), -1)[mask]
            naive_kl = (reference.exp() * (reference - other)).sum(-1).mean().item()
            assert scores["skip_kl"][layer] == pytest.approx(naive_kl, rel=1e-4, abs=1e-9)
            if layer < 3:  # hidden_states[l + 1] is layer l's output before the final norm
                cos = torch.nn.functional.cosine_similarity(out.hidden_states[layer], out.hidden_states[layer + 1], -1)
                assert scores["block_influence"][layer] == pytest.approx((1 - cos[mask]).mean().item(), rel=1e-4)
    assert min(scores["skip_kl"]) > 0  # random layers all matter a little


def _naive_kl(teacher, indices, ids, mask) -> float:
    """KL(teacher ‖ teacher cut to ``indices``), float64, mean over the scored tokens."""
    with torch.no_grad():
        reference = torch.log_softmax(teacher(ids).logits.double(), -1)[mask]
        cut, _ = cut_student(teacher, indices=indices)
        other = torch.log_softmax(cut(ids).logits.double(), -1)[mask]
    return (reference.exp() * (reference - other)).sum(-1).mean().item()


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_greedy_cut_matches_a_naive_greedy_search(family, tiny_tokenizer):
    """Each round drops the layer whose removal, with those already dropped, costs least KL: checked by cutting."""
    teacher = four_layer_teacher(family, tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer, tokens=96)
    ids, mask = calibration.input_ids, calibration.scored
    path = greedy_cut(teacher, calibration, keep=1)
    kept = list(range(4))
    for layer, kl in path["dropped"]:
        cost = {i: _naive_kl(teacher, [j for j in kept if j != i], ids, mask) for i in kept}
        assert layer == min(cost, key=cost.get)
        assert kl == pytest.approx(cost[layer], rel=1e-4, abs=1e-9)
        kept.remove(layer)
    assert path["kept"] == kept and len(path["dropped"]) == 3
    # The reference loop's first round is skip-KL; both are float32 sums of the same float64 quantity.
    one_at_a_time = layer_scores(teacher, calibration)["skip_kl"]
    reference = greedy_cut(teacher, calibration, keep=1, impl="reference")
    assert reference["first_round"] == pytest.approx(one_at_a_time, rel=1e-6, abs=1e-12)
    assert reference["kept"] == path["kept"]
    with pytest.raises(ValueError, match="between 1 and the teacher's 4 layers, found 5"):
        greedy_cut(teacher, calibration, keep=5)


def test_importance_drops_the_layers_that_do_nothing(identity_teacher, tiny_tokenizer, tmp_path):
    calibration = calibration_of(tiny_tokenizer)
    chosen = {}
    for select in ("importance", "contiguous", "even"):
        chosen[select] = init_student(StudentInitSpec(str(identity_teacher), tmp_path / select, layers=4, select=select,
                                      calibration=calibration))
    assert chosen["importance"]["kept_layers"] == [0, 1, 4, 5]
    assert chosen["contiguous"]["kept_layers"] == [0, 1, 4, 5]
    assert chosen["even"]["kept_layers"] == [0, 2, 3, 5]
    # Dropping pass-through layers changes nothing: the student starts exactly where the teacher is.
    measured = chosen["importance"]
    assert measured["start_perplexity"] == pytest.approx(measured["teacher_perplexity"], rel=1e-5)
    even = chosen["even"]  # drops two working layers: the figure moves (on random teachers, either way)
    assert abs(even["start_perplexity"] / even["teacher_perplexity"] - 1) > 1e-3
    record = json.loads((tmp_path / "importance" / "destila_student.json").read_text())
    assert record["layers"]["criterion"] == "greedy_kl"  # the default
    assert {d["layer"] for d in record["layers"]["dropped"]} == {2, 3}
    assert max(d["kl"] for d in record["layers"]["dropped"]) == pytest.approx(0, abs=1e-9)
    one_shot = init_student(StudentInitSpec(str(identity_teacher), tmp_path / "skip", layers=4, select="importance",
                            criterion="skip_kl", calibration=calibration))
    assert one_shot["kept_layers"] == [0, 1, 4, 5]
    record = json.loads((tmp_path / "skip" / "destila_student.json").read_text())
    assert record["layers"]["criterion"] == "skip_kl"
    assert len(record["layers"]["skip_kl"]) == len(record["layers"]["block_influence"]) == 6
    assert record["layers"]["skip_kl"][2] == pytest.approx(0, abs=1e-9)
    assert record["layers"]["block_influence"][3] == pytest.approx(0, abs=1e-6)
    assert min(record["layers"]["skip_kl"][i] for i in (0, 1, 4, 5)) > 1e-6
    by_influence = init_student(StudentInitSpec(str(identity_teacher), tmp_path / "bi", layers=4, select="importance",
                                criterion="block_influence", calibration=calibration))
    assert by_influence["kept_layers"] == [0, 1, 4, 5]
    record = json.loads((tmp_path / "bi" / "destila_student.json").read_text())
    assert record["layers"]["criterion"] == "block_influence" and record["layers"]["skip_kl"] is None  # not paid for


def test_cli_importance_cut_loads_and_trains(identity_teacher, identity_cache, tmp_path, capsys):
    """`student init --select importance --data …`, then `destila train` on the teacher's cache."""
    out = tmp_path / "student"
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(identity_teacher), "-o", str(out), "--layers", "4", "--select", "importance",
             "--data", "pydoc", "--calibration-tokens", "512"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "kept teacher layers: 0-1,4-5 (importance)" in printed
    assert "starting perplexity on" in printed and "held-out calibration tokens" in printed
    student = AutoModelForCausalLM.from_pretrained(out)
    teacher = AutoModelForCausalLM.from_pretrained(identity_teacher)
    assert student.config.num_hidden_layers == 4
    if hasattr(teacher.config, "layer_types"):
        assert student.config.layer_types == [teacher.config.layer_types[i] for i in (0, 1, 4, 5)]
    with pytest.raises(SystemExit) as done:
        cli(["train", str(out), "--cache", str(identity_cache), "-o", str(tmp_path / "trained"), "--max_steps", "2",
             "--per_device_train_batch_size", "4"])
    assert done.value.code == 0
    assert read_log_records(tmp_path / "trained" / "log.jsonl")
    AutoModelForCausalLM.from_pretrained(tmp_path / "trained")


def test_explicit_list_and_cache_calibration(tiny_llama_dir, tiny_cache, tmp_path, capsys):
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(tiny_llama_dir), "-o", str(tmp_path / "s"), "--layers", "0-1,3",
             "--cache", str(tiny_cache), "--calibration-tokens", "128"])
    assert done.value.code == 0
    printed = capsys.readouterr().out
    assert "kept teacher layers: 0-1,3 (list)" in printed and "starting perplexity" in printed
    record = json.loads((tmp_path / "s" / "destila_student.json").read_text())
    assert record["kept_layers"] == [0, 1, 3] and record["calibration"].startswith("cache ")
    assert record["calibration_tokens"] == 128  # four cached rows of 32 tokens


@pytest.mark.parametrize("argv, message", [
    (["--layers", "0-9"], "between 0 and 3 (the teacher has 4 layers), found [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]"),
    (["--layers", "5"], "between 1 and the teacher's 4 layers, found 5"),
    (["--layers", "7-3"], "expected teacher layer indices like 0-7,27-29, found '7-3'"),
    (["--layers", "2", "--select", "importance"], "--select importance: measuring the layers needs calibration text"),
    (["--layers", "0,3", "--select", "importance", "--data", "pydoc"], "the layers were given explicitly"),
    (["--layers", "2", "--criterion", "block_influence"], "applies to --select importance only"),
    (["--layers", "2", "--calibration-tokens", "64"], "--calibration-tokens: applies to calibration text"),
    (["--layers", "2", "--text-field", "body"], "--text-field: applies to --data only"),
    (["--layers", "2", "--seed", "3"], "--seed: seeds a fresh model's initialisation (--config)"),
    (["--config", "num_hidden_layers=1", "--data", "pydoc"], "apply to a cut (--layers), not to --config"),
])
def test_bad_input_is_one_line_and_writes_nothing(argv, message, tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "s"
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(tiny_llama_dir), "-o", str(out), *argv])
    assert done.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err
    assert "Traceback" not in err and message in err.splitlines()[-1]
    assert sum("error" in line for line in err.splitlines()) == 1
    assert not out.exists()


def test_held_out_rows_and_a_single_row(tiny_tokenizer, tiny_llama_dir, tmp_path, capsys):
    calibration = calibration_of(tiny_tokenizer, tokens=16 * 8, seq_len=8)
    selection, held_out = calibration.split()
    assert selection.input_ids.shape[0] == 12 and held_out.input_ids.shape[0] == 4
    torch.testing.assert_close(torch.cat([selection.input_ids, held_out.input_ids]), calibration.input_ids)
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(tiny_llama_dir), "-o", str(tmp_path / "s"), "--layers", "2", "--data", "pydoc",
             "--calibration-tokens", "100"])
    assert done.value.code == 0
    assert "starting perplexity on 99 (not held out: one row only) calibration tokens" in capsys.readouterr().out


def test_gemma3_is_refused_in_one_line(tiny_tokenizer, tmp_path, capsys):
    """Gemma3's layer_types and its scaled embeddings are not covered yet: refused, not cut wrongly."""
    from transformers import Gemma3TextConfig

    path = tmp_path / "gemma3"
    AutoModelForCausalLM.from_config(Gemma3TextConfig(
        vocab_size=len(tiny_tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8)).save_pretrained(path)
    tiny_tokenizer.save_pretrained(path)
    with pytest.raises(SystemExit) as done:
        cli(["student", "init", str(path), "-o", str(tmp_path / "s"), "--layers", "1"])
    assert done.value.code == 2
    assert "model type 'gemma3_text' is not supported for layer cutting" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()


def test_too_few_calibration_tokens_are_warned_of_in_one_line(tiny_llama_dir, tmp_path):
    """Importance chosen on 5 tokens (one row, chosen and scored on the same tokens) said nothing."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    src = str(Path(__file__).parents[1] / "src")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")]))}

    def init(tokens: int, out: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "destila", "student", "init", str(tiny_llama_dir), "-o",
                               str(tmp_path / out), "--layers", "2", "--select", "importance", "--data", "pydoc",
                               "--calibration-tokens", str(tokens)], env=env, capture_output=True, text=True,
                              timeout=300)

    few = init(5, "few")
    assert few.returncode == 0, few.stderr[-2000:]
    warned = [line for line in few.stderr.splitlines() if "calibration:" in line]
    assert len(warned) == 1 and "only 5 tokens (1 row, none held out) from data pydoc" in warned[0], few.stderr
    assert "give 1,024 or more (--calibration-tokens, default 4,096)" in warned[0]
    enough = init(1024, "enough")
    assert enough.returncode == 0 and "calibration:" not in enough.stderr, enough.stderr[-2000:]
