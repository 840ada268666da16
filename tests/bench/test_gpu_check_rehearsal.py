"""`bash benchmarks/gpu/check.sh --rehearse OUT`: every step of the GPU check run for real on CPU, at small shapes.

Slow (about 5 minutes on 2 cores): `make test-slow` runs it. What it checks is what a GPU run must give: every
step passes, the same files come back (at most 8), and each file holds measured rows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ["check_rehearsal.log", "loss_rehearsal.jsonl", "main_job_rehearsal.json", "loss_256k_rehearsal.jsonl",
         "e2e_8k_rehearsal.json", "precision_rehearsal.jsonl", "chunk_curve_rehearsal.jsonl",
         "verdicts_rehearsal.txt"]


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_rehearsal_runs_every_step_and_writes_the_gpu_runs_files(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)  # the rehearsal turns it on itself
    done = subprocess.run(["bash", "benchmarks/gpu/check.sh", "--rehearse", str(tmp_path / "out")], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=1700)
    results = tmp_path / "out" / "gpu-rehearsal"
    log = (results / "check_rehearsal.log").read_text() if (results / "check_rehearsal.log").exists() else ""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:] + log[-4000:]
    assert sorted(p.name for p in results.iterdir()) == sorted(FILES)
    assert "0 step(s) not passed" in done.stdout

    loss = {(r["impl"], r["seq_len"]): r for r in _jsonl(results / "loss_rehearsal.jsonl")}
    for n in (256, 512, 1024):
        assert loss[("fused", n)]["status"] == "ok" and loss[("fused", n)]["ratio_to_floor"] > 0
        for peer in ("liger-fljsd", "liger-distill"):  # in Triton's interpreter: values real, time marked
            assert loss[(peer, n)]["status"] == "ok" and "interpreter" in loss[(peer, n)]["note"]
        assert loss[("cce", n)]["status"] == "unavailable" and loss[("cce", n)]["error"]
    big = _jsonl(results / "loss_256k_rehearsal.jsonl")
    assert {r["impl"] for r in big if r["status"] == "ok"} == {"floor", "fused", "fused-exact"}

    job = json.loads((results / "main_job_rehearsal.json").read_text())
    assert job["teacher_pass"]["pass_over_bare"] > 0 and job["student"]["kd_over_ce"] > 0
    assert job["eval"]["tokens"] > 0
    e2e = json.loads((results / "e2e_8k_rehearsal.json").read_text())
    assert {r["method"]: r["status"] for r in e2e["rows"]} == {"chunked": "ok", "fused": "ok"}
    assert _jsonl(results / "precision_rehearsal.jsonl") and _jsonl(results / "chunk_curve_rehearsal.jsonl")

    verdicts = (results / "verdicts_rehearsal.txt").read_text().splitlines()
    assert verdicts[0].startswith("REHEARSAL on CPU")
    assert any(line.startswith("fused / floor at 1K:") for line in verdicts)
    assert any(line.startswith("main job, student") for line in verdicts)
    assert any(line.startswith("e2e 256 step:") for line in verdicts)
