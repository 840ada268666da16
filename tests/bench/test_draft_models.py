"""`benchmarks/draft_models.py` run as its docstring shows, on a tiny random teacher and small sizes: every row
trains, every draft is measured with greedy text identical to the teacher's, and the table reads the rows."""

import json

import pytest
from conftest import save_tiny_model

from benchmarks import draft_agreement, draft_models
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
    widths = (1, 2, 4, 8, 16)
    assert set(costs) == {*(f"teacher, {w} new" for w in widths),
                          *(f"teacher, torch products, {w} new" for w in widths),
                          "1 layers, whole head", "1 layers, 64 rows"} and all(v > 0 for v in costs.values())
    records = read_json_lines(out)
    rows = [(r["row"], r["draft_vocab"], r["proposals"], r["matmul"], r["temperature"]) for r in records]
    trained = [*draft_models.ROWS, *draft_models.DIVERGENCE_ROWS, *draft_models.LONG_ROWS]
    assert rows[:3] == [("prompt_lookup", None, 1, "timed", 0), ("prompt_lookup", None, 10, "timed", 0),
                        ("cut", 64, 1, "timed", 0)]
    assert rows[3:3 + len(trained)] == [(row, 64, 1, "timed", 0) for row in trained]
    # The best KD draft again: whole head, 2 proposals, transformers' adaptive proposals, torch's products.
    extras = rows[3 + len(trained):3 + len(trained) + 4]
    assert [r[1:] for r in extras] == [(None, 1, "timed", 0), (64, 2, "timed", 0), (64, 0, "timed", 0),
                                       (64, 1, "torch", 0)]
    assert all(r[0].startswith("kd-answers") for r in extras)
    # Then speculative sampling: prompt lookup and the longest-trained answers rows.
    assert rows[3 + len(trained) + 4:] == [("prompt_lookup", None, 1, "timed", 1.0),
                                           *((row, 64, 1, "timed", 1.0) for row in draft_models.SAMPLED_ROWS)]
    for r in records:
        assert r["errors"] == [] and r["tokens_per_forward"] >= 1
        assert r["teacher_forward_ms"] > 0 and r["teacher_forward_2_ms"] > 0
        assert r["identical"] == (2 if r["temperature"] == 0 else None)
    # A rerun measures nothing again.
    draft_models.main(["measure", str(work), "--teacher", str(teacher), "--sizes", "1", "--seeds", "0",
                       "--tokens", "256", "--out", str(out), "--prompts", "2", "--new-tokens", "6",
                       "--draft-vocab", "64"])
    assert len(read_json_lines(out)) == len(records)
    capsys.readouterr()
    draft_models.main(["table", str(out)])
    table = capsys.readouterr().out
    assert "| 1 | kd-answers | 64 | 1 | timed | greedy | 1 |" in table and "| adaptive | timed |" in table
    assert "| – | prompt lookup | – | 10 | timed | greedy |" in table
    assert "| 1 | kd-answers-16x | 64 | 1 | timed | T = 1 | 1 |" in table and table.rstrip().endswith("| – |")
    draft_models.main(["plot", str(out), "--image", str(tmp_path / "p.png")])
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    costs = json.loads((tmp_path / "draft_models_costs.json").read_text())
    assert "with torch's own products" in draft_models.costs_line(costs)
    # The agreement estimate on the same drafts: every one read once, a rerun reads none again.
    agreed = tmp_path / "draft_agreement.jsonl"
    argv = [str(work), "--teacher", str(teacher), "--sizes", "1", "--seeds", "0", "--out", str(agreed),
            "--prompts", "3", "--new-tokens", "6"]
    draft_agreement.main(argv)
    estimates = read_json_lines(agreed)
    assert [(r["row"], r["seed"]) for r in estimates] == [("cut", 0), *((row, 0) for row in trained)]
    for r in estimates:
        assert 0 <= r["greedy"] <= 1 and 0 < r["sampling"] <= 1 and r["prompts"] == 3 and r["positions"] > 0
    draft_agreement.main(argv)
    assert len(read_json_lines(agreed)) == len(estimates)
