"""The draft benchmark's agreement estimate: exact on cases whose answer is known."""

import re

import pytest
import torch

from benchmarks.draft_agreement import agreement, table


def test_a_draft_that_is_the_teacher_agrees_everywhere_and_a_uniform_one_as_its_overlap_says():
    torch.manual_seed(0)
    answers = [{"ids": [5, 1, 2, 3], "start": 1}, {"ids": [7, 7, 0], "start": 2}]  # 3 and 1 answer positions
    teacher = [torch.softmax(torch.randn(3, 6), -1), torch.softmax(torch.randn(1, 6), -1)]
    teacher[0][torch.arange(3), torch.tensor([1, 2, 3])] += 1.0  # the answer's tokens are the teacher's top ones
    teacher[1][0, 0] += 1.0
    teacher = [p / p.sum(-1, keepdim=True) for p in teacher]
    assert agreement(teacher, teacher, answers) == {"greedy": 1.0, "sampling": 1.0, "positions": 4}
    uniform = [torch.full_like(p, 1 / 6) for p in teacher]
    expected = torch.cat([torch.minimum(p.double(), torch.tensor(1 / 6)).sum(-1) for p in teacher]).mean().item()
    found = agreement(teacher, uniform, answers)
    assert found["sampling"] == pytest.approx(expected, abs=1e-4) and found["sampling"] < 1
    # A uniform draft's top token is its first (argmax takes the first of ties): token 0, the answer once in 4.
    assert found["greedy"] == 0.25


def test_the_table_gives_each_draft_its_mean_over_seeds():
    records = [{"row": "kd-answers-16x", "layers": 2, "seed": s, "greedy": g, "sampling": 0.4, "prompts": 48}
               for s, g in ((0, 0.37), (1, 0.35))] + [
              {"row": "cut", "layers": 2, "seed": 0, "greedy": 0.01, "sampling": 0.02, "prompts": 48}]
    lines = table(records).splitlines()
    assert lines[2] == "| 2 | cut | 1 | 0.010 | 0.020 |"
    assert lines[3] == "| 2 | kd-answers-16x | 2 | 0.360 ± 0.010 | 0.400 ± 0.000 |"


def test_any_drafts_on_a_prompts_file_each_with_its_step(tmp_path, tiny_tokenizer, capsys, monkeypatch):
    from conftest import save_tiny_model

    from benchmarks import draft_agreement
    from benchmarks.draft_agreement import main
    from destila.io.json_lines import read_json_lines

    teacher = save_tiny_model(tmp_path / "teacher", tiny_tokenizer, layers=2, hidden=32)
    checkpoint = save_tiny_model(tmp_path / "run" / "checkpoint-5", tiny_tokenizer, layers=1, hidden=32)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 5}')
    held = tmp_path / "held.txt"
    held.write_text("one prompt\nanother prompt\na third\n")
    out = tmp_path / "agreement.jsonl"
    argv = ["--teacher", str(teacher), "--held-out", str(held), "--prompts", "2", "--new-tokens", "4",
            "--out", str(out), "--drafts", str(checkpoint), str(teacher)]
    main(argv)
    records = read_json_lines(out)
    assert [(r["draft"], r["step"], r["prompts"]) for r in records] == [(str(checkpoint), 5, 2),
                                                                          (str(teacher), None, 2)]
    # The teacher as its own draft agrees at every position, as the exact estimate must.
    assert records[1]["greedy"] == 1.0 and records[1]["sampling"] == pytest.approx(1.0, abs=1e-4)
    assert 0 <= records[0]["greedy"] <= 1 and 0 < records[0]["sampling"] <= 1
    # A rerun reads no draft again, nor has the teacher answer again.
    monkeypatch.setattr(draft_agreement, "teacher_answers", lambda *args: pytest.fail("the teacher answered again"))
    main(argv)
    assert len(read_json_lines(out)) == 2
    capsys.readouterr()
    main(["--table", "--out", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "| step | run | teacher |"
    assert re.fullmatch(r"\| 5 \| [01]\.\d{3} / [01]\.\d{3} \| – \|", lines[2])
    assert lines[3].startswith("| – | – | 1.000 / 1.000 |") and len(lines) == 4


def test_drafts_without_a_prompts_file_or_with_a_missing_folder_are_refused(tmp_path, capsys):
    from benchmarks.draft_agreement import main

    with pytest.raises(SystemExit):
        main(["--drafts", str(tmp_path), "--held-out", str(tmp_path / "held.txt")])  # no --out
    assert "expected --held-out FILE (the prompts to answer), --out FILE" in capsys.readouterr().err
    (tmp_path / "held.txt").write_text("a prompt\n")
    with pytest.raises(Exception, match="no-such-draft"):
        main(["--drafts", str(tmp_path / "no-such-draft"), "--held-out", str(tmp_path / "held.txt"),
              "--out", str(tmp_path / "a.jsonl")])
    assert not (tmp_path / "a.jsonl").exists()
