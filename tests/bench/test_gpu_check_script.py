"""benchmarks/gpu/check.sh cannot run without a GPU; here it is at least parsed, and its flags exist."""

import re
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "gpu" / "check.sh"


def test_gpu_check_script_parses_and_stops_on_error():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    text = SCRIPT.read_text()
    assert "set -euo pipefail" in text and "trap " in text


@pytest.mark.slow
def test_gpu_check_script_uses_existing_flags():
    """Every --flag the script passes to a destila verb is one that verb's --help lists."""
    import sys

    commands = SCRIPT.read_text().replace("\\\n", " ").splitlines()  # continuation lines joined
    checked = 0
    for verb in (["bench", "loss"], ["bench", "e2e"], ["cache", "build"], ["student", "init"]):
        help_text = subprocess.run([sys.executable, "-m", "destila", *verb, "--help"], capture_output=True,
                                   text=True, check=True).stdout
        for line in commands:
            if line.strip().startswith('"${DESTILA[@]}" ' + " ".join(verb)):
                for flag in set(re.findall(r"\s(--[a-z][a-z0-9_-]*)", line)):
                    assert flag in help_text, f"destila {' '.join(verb)} has no {flag}"
                    checked += 1
    assert checked >= 20, checked
