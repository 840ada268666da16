"""benchmarks/student_select.py end to end on a tiny teacher: the raced search with one and two workers beside
the plain loop, each a JSON line with the same layers."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "student_select.py"


def test_the_search_is_timed_and_counted_with_the_same_layers_as_the_plain_loop(tiny_llama_dir, tmp_path):
    out = tmp_path / "select.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    common = ["--teacher", str(tiny_llama_dir), "--data", "pydoc", "--layers", "2", "--calibration-tokens", "512"]
    for extra in (["--workers", "1"], ["--workers", "2", "--threads", "2"], ["--impl", "reference"]):
        done = subprocess.run([sys.executable, str(SCRIPT), str(out), *common, *extra], env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
    serial, paired, plain = [json.loads(line) for line in out.read_text().splitlines()]
    assert (serial["workers"], paired["workers"], plain["workers"]) == (1, 2, None)
    assert serial["kept"] == paired["kept"] == plain["kept"] and len(plain["kept"]) == 2
    assert [d[0] for d in serial["dropped"]] == [d[0] for d in paired["dropped"]] == [d[0] for d in plain["dropped"]]
    assert plain["layer_tokens"] == plain["plain_loop"]["layer_tokens"]  # the loop's work follows from the loop
    assert serial["head_tokens"] < plain["head_tokens"] and serial["seconds"] > 0
