"""`benchmarks/draft_models.py` run as its docstring shows, on a tiny random teacher and small sizes: every row
trains, every draft is measured with greedy text identical to the teacher's, and the table reads the rows."""

import json

import pytest
from conftest import save_tiny_model

from benchmarks import draft_models
from destila.io.json_lines import read_json_lines


pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_tokenizer):
    return save_tiny_model(tmp_path_factory.mktemp("bench-draft-teacher"), tiny_tokenizer, layers=3, hidden=32)


def test_train_measure_and_table(teacher, tmp_path, capsys):
    work, out = tmp_path / "work", tmp_path / "draft_models.jsonl"
    draft_models.main(["train", str(work), "--teacher", str(teacher), "--sizes", "1", "--seeds", "0",
                       "--tokens", "256", "--train-prompts", "8", "--answer-tokens", "8"])
    draft_models.main(["measure", str(work), "--teacher", str(teacher), "--sizes", "1", "--seeds", "0",
                       "--tokens", "256", "--out", str(out), "--prompts", "2", "--new-tokens", "6",
                       "--draft-vocab", "64"])
    costs = json.loads((tmp_path / "draft_models_costs.json").read_text())["ms"]
    assert set(costs) == {"teacher, 1 new", "teacher, 2 new", "teacher, 4 new", "teacher, 8 new", "teacher, 16 new",
                          "1 layers, whole head", "1 layers, 64 rows"} and all(v > 0 for v in costs.values())
    records = read_json_lines(out)
    rows = [(r["row"], r["draft_vocab"]) for r in records]
    trained = [*draft_models.ROWS, *draft_models.DIVERGENCE_ROWS, *draft_models.LONG_ROWS]
    assert rows[:2] == [("prompt_lookup", None), ("cut", 64)]
    assert rows[2:2 + len(trained)] == [(row, 64) for row in trained]
    assert rows[-1][0].startswith("kd-answers") and rows[-1][1] is None  # the best KD draft again, whole head
    for r in records:
        assert r["errors"] == [] and r["identical"] == 2 and r["tokens_per_forward"] >= 1
    # A rerun measures nothing again.
    draft_models.main(["measure", str(work), "--teacher", str(teacher), "--sizes", "1", "--seeds", "0",
                       "--tokens", "256", "--out", str(out), "--prompts", "2", "--new-tokens", "6",
                       "--draft-vocab", "64"])
    assert len(read_json_lines(out)) == len(records)
    capsys.readouterr()
    draft_models.main(["table", str(out)])
    table = capsys.readouterr().out
    assert "| 1 | kd-answers | 64 | 1 |" in table and "prompt lookup" in table
    draft_models.main(["plot", str(out), "--image", str(tmp_path / "p.png")])
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    assert "ms for 1 new token" in draft_models.costs_line(json.loads((tmp_path / "draft_models_costs.json").read_text()))
