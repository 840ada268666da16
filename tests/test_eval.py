import json
import math

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from conftest import pydoc_texts
from destila.cache import build_cache
from destila.cli.main import main as cli
from destila.data import DataSpec, pack_documents
from destila.eval import EvalSpec, comparison_rows, evaluate_model, markdown_table
from destila.student import StudentInitSpec, init_student


@pytest.fixture(scope="module")
def small_cache(tiny_llama_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("eval") / "cache"
    build_cache(str(tiny_llama_dir), pydoc_texts(3), path, seq_len=32, top_k=16, progress=False)
    return path


def test_teacher_against_itself_has_no_divergence(tiny_llama_dir, small_cache):
    on_cache = evaluate_model(EvalSpec([str(tiny_llama_dir)], cache=str(small_cache), new_tokens=4))
    assert on_cache["top1_agreement"] == 1.0
    assert abs(on_cache["kl_to_teacher"]) < 1e-3  # float16 log-probs: p sums to 1 only within rounding
    with_teacher = evaluate_model(EvalSpec([str(tiny_llama_dir)], data=DataSpec(pydoc_texts(3), seq_len=32),
                                           teacher=str(tiny_llama_dir), new_tokens=4))
    assert with_teacher["top1_agreement"] == 1.0
    assert abs(with_teacher["kl_to_teacher"]) < 1e-6


def test_perplexity_and_accuracy_match_a_direct_computation(tiny_llama_dir, tiny_tokenizer):
    result = evaluate_model(EvalSpec([str(tiny_llama_dir)], data=DataSpec(pydoc_texts(3), seq_len=32), max_tokens=32 * 12,
                                     new_tokens=4))
    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir)
    ids = pack_documents(pydoc_texts(3), tiny_tokenizer, 32, max_tokens=32 * 12)
    with torch.no_grad():
        output = model(ids, labels=ids)  # HF shifts the labels itself
    assert result["tokens"] == ids.shape[0] * 31
    assert result["perplexity"] == pytest.approx(math.exp(output.loss.item()), rel=1e-5)
    predicted = output.logits[:, :-1].argmax(-1)
    assert result["accuracy"] == (predicted == ids[:, 1:]).sum().item() / result["tokens"]
    assert "kl_to_teacher" not in result  # no teacher, no cache: nothing to compare with
    assert result["parameters"] == sum(p.numel() for p in model.parameters())
    assert result["size_bytes"] > 0 and result["forward_tokens_per_second"] > 0
    assert result["generate_tokens_per_second"] > 0 and result["peak_bytes"] > 0


def test_cli_compares_models_side_by_side(tiny_llama_dir, small_cache, tmp_path, capsys):
    student = tmp_path / "student"
    init_student(StudentInitSpec(str(tiny_llama_dir), student, config={"num_hidden_layers": 1}, seed=3))
    AutoTokenizer.from_pretrained(student)
    out = tmp_path / "eval.json"
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", str(tiny_llama_dir), str(student), "--cache", str(small_cache), "--new-tokens", "4",
             "--json", str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert "KL to teacher" in printed and "(×" in printed
    results = json.loads(out.read_text())
    assert [r["model"] for r in results] == [str(tiny_llama_dir), str(student)]
    assert results[1]["kl_to_teacher"] > results[0]["kl_to_teacher"]
    assert results[1]["peak_bytes"] > 0  # measured in its own process
    rows = dict(comparison_rows(results))
    assert rows["parameters"][1].endswith(f"(×{results[1]['parameters'] / results[0]['parameters']:.2f})")
    assert markdown_table(results).count("\n") == len(rows) + 1


@pytest.mark.parametrize("what", [["--tasks", "pydoc_next_word"], ["--data", "pydoc"]])
def test_cli_a_missing_model_fails_before_any_work(tiny_llama_dir, tmp_path, capsys, monkeypatch, what):
    """Neither the task data nor a worker process is made for a model path that is not there."""
    import destila.cli.eval as cli_eval

    def never(*_args, **_kwargs):
        raise AssertionError("work started for a model that does not exist")

    monkeypatch.setattr(cli_eval, "prepare_tasks", never)
    monkeypatch.setattr(cli_eval, "evaluate_models", never)
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", str(tiny_llama_dir), str(tmp_path / "nope"), *what])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"destila eval: error: model: no such file or folder: {tmp_path / 'nope'}"
