"""docs/draft.md's measurement on the embedded SmolLM2-135M teacher, verbatim, with a 2-layer untrained cut."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
from conftest import requires_real_teacher

pytestmark = [pytest.mark.real_model, requires_real_teacher]

COMMANDS = (
    "destila student init smollm2 -o cut2 --layers 2",
    "destila eval smollm2 --draft cut2 --prompts prompts.txt --max-new-tokens 32 --json draft.json",
)


def test_documented_draft_measurement_on_smollm2(tmp_path):
    (tmp_path / "prompts.txt").write_text("def fibonacci(n):\n"
                                          "The os.path module provides\n")
    for command in COMMANDS:
        words = shlex.split(command)
        done = subprocess.run([sys.executable, "-m", *words], cwd=tmp_path, capture_output=True, text=True,
                              timeout=900)
        assert done.returncode == 0, (command, done.stderr[-2000:])
    printed = done.stdout
    report = json.loads((tmp_path / "draft.json").read_text())
    ways = {row["way"]: row for row in report["ways"]}
    assert len(ways) == 3 and report["errors"] == []
    for row in ways.values():
        assert row["tokens_per_second"] > 0 and row["tokens_per_forward"] >= 1
    drafted = [row for row in ways.values() if row["proposed"] and row["draft_forwards"]]
    assert len(drafted) == 1 and 0 <= drafted[0]["acceptance"] <= 1
    assert all(row["identical"] == 2 for row in ways.values() if "identical" in row)
    assert "identical" in printed and "acceptance" in printed
