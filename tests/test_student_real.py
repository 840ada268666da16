"""docs/student.md's commands, verbatim, on the embedded SmolLM2-135M: each folder loads with plain
transformers and `destila train` trains it on a small cache of the same teacher."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
from conftest import requires_real_teacher
from test_docs_commands import shown_commands
from transformers import AutoModelForCausalLM

from destila.cli.main import main as cli
from destila.training.output_dir import read_log_records

# Five SmolLM2 students, one measured by skip-KL (about 15 passes of the teacher): minutes on 2 CPU cores.
pytestmark = [pytest.mark.real_model, pytest.mark.slow, pytest.mark.timeout(3600), requires_real_teacher]

DOC = Path(__file__).resolve().parent.parent / "docs" / "student.md"


def test_documented_student_commands_on_smollm2(tmp_path, monkeypatch, capsys):
    from destila.cache import build_cache

    monkeypatch.chdir(tmp_path)
    build_cache("smollm2", "pydoc", tmp_path / "cache", seq_len=64, max_tokens=64 * 8, top_k=16, progress=False)
    commands = [command for _, command in shown_commands(DOC)]
    assert len(commands) == 5
    for command in commands:
        argv = shlex.split(command)
        with pytest.raises(SystemExit) as done:
            cli(argv)
        printed = capsys.readouterr().out
        assert done.value.code == 0, command
        out = Path(argv[argv.index("-o") + 1])
        record = json.loads((out / "destila_student.json").read_text())
        student = AutoModelForCausalLM.from_pretrained(out)
        assert record["student_parameters"] == sum(p.numel() for p in student.parameters())
        assert record["student_parameters"] < record["teacher_parameters"] == 134_515_008
        if "--data" in argv:  # calibration text given: the starting perplexity is printed and recorded
            assert "starting perplexity on" in printed and record["start_perplexity"] > record["teacher_perplexity"]
        if "--hidden-size" in argv:
            config = student.config
            assert (config.hidden_size, config.intermediate_size, config.num_attention_heads,
                    config.num_key_value_heads, config.head_dim) == (384, 1024, 6, 3, 64)
        if "importance" in argv:
            assert record["layers"]["criterion"] == "greedy_kl" and len(record["layers"]["dropped"]) == 30 - 15
            assert record["layers"]["skip_kl"] is None  # the raced search rules most layers out without it
        with pytest.raises(SystemExit) as done:
            cli(["train", str(out), "--cache", str(tmp_path / "cache"), "-o", str(tmp_path / f"trained-{out.name}"),
                 "--max_steps", "1", "--per_device_train_batch_size", "2"])
        assert done.value.code == 0
        assert read_log_records(tmp_path / f"trained-{out.name}" / "log.jsonl")
