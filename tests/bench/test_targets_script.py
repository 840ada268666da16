"""benchmarks/targets_compare.py end to end on a tiny teacher: caches, students and the plot."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "targets_compare.py"


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_every_kind_of_target_is_built_trained_and_plotted(tiny_llama_dir, tmp_path):
    out = tmp_path / "targets"
    common = ["--out", str(out), "--teacher", str(tiny_llama_dir), "--seq-len", "32", "--max-tokens", "512"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    for stage in (["caches"], ["students", "--layers", "1", "--steps", "3", "--eval-tokens", "128",
                               "--held-out-documents", "5"], ["plot", "--png", str(tmp_path / "t.png")]):
        done = subprocess.run([sys.executable, str(SCRIPT), stage[0], *common, *stage[1:]], env=env,
                              capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    caches = {r["config"]: r for r in records if r["stage"] == "caches"}
    students = {r["config"]: r for r in records if r["stage"] == "students"}
    assert set(caches) == {"topk100-plain-fp32", "topk100-plain-fp16", "topk100-compact", "sampled16-compact",
                           "sampled64-compact"}
    # compact holds the same top-K as float16 within the documented decode error, in fewer bytes
    assert caches["topk100-compact"]["decode_kl_mean"] < 1e-4
    assert caches["topk100-compact"]["bytes_per_token"] < caches["topk100-plain-fp16"]["bytes_per_token"]
    assert set(students) == {"online", *set(caches) - {"topk100-plain-fp32"}}
    assert all(r["heldout_kl_to_teacher"] > 0 and r["heldout_tokens"] > 0 for r in students.values())
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
