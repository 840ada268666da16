"""The GPU check's files, once they come back, give the verdicts and the docs section (synthetic rows here)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import verdicts  # noqa: E402  (benchmarks/gpu is a folder of scripts)

from benchmarks import make_docs  # noqa: E402

GIB = 2 ** 30


def _row(impl, n, seconds, floor, peak_gib, **extra):
    return {"impl": impl, "seq_len": n, "status": "ok", "seconds": seconds, "floor_seconds": floor,
            "ratio_to_floor": seconds / floor, "peak_bytes": int(peak_gib * GIB), "dtype": "bfloat16", "hidden": 4096,
            "vocab": 131072, "top_k": 100, "chunk_size": 2048, "error": None, "cpu": "x", "cores": 16,
            "torch": "2.11", "gpu": "NVIDIA H100", "path": "fused, precision fast", **extra}


def _write(folder: Path, card: str) -> None:
    folder.mkdir(parents=True)
    loss = []
    for n in (8192, 16384, 32768):
        loss += [_row("floor", n, 0.1, 0.1, 1.0), _row("fused", n, 0.11, 0.1, 2.0),
                 _row("liger-fljsd", n, 0.3, 0.1, 6.0), _row("liger-distill", n, 0.2, 0.1, 1.5)]
    loss.append({**_row("cce", 8192, 0.05, 0.1, 1.0), "status": "error", "error": "boom"})
    (folder / f"loss_{card}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in loss))
    (folder / f"loss_256k_{card}.jsonl").write_text(json.dumps(_row("fused", 262144, 1.0, 0.9, 10.5)) + "\n")
    e2e = {"config": {"seq_len": 8192, "steps": 4, "warmup_steps": 1, "dtype": "bfloat16"},
           "rows": [{"method": m, "status": "ok", "peak_bytes": GIB, "step_seconds": s, "tokens_per_second": 1e4,
                     "final_loss": 0.1} for m, s in (("chunked", 0.07), ("fused", 0.06))]}
    (folder / f"e2e_8k_{card}.json").write_text(json.dumps(e2e))
    main_job = {"teacher_weights": "random", "data": "pydoc", "seq_len": 2048, "dtype": "bfloat16",
                "teacher_pass": {"tokens": 131072, "pass_tokens_per_s": 2e5, "bare_tokens_per_s": 2.5e5,
                                 "pass_over_bare": 1.25},
                "student": {"student_layers": 6, "steps": 20, "kd_step_seconds": 0.06, "ce_step_seconds": 0.05,
                            "kd_over_ce": 1.2},
                "eval": {"seconds": 3.0, "tokens": 16384}}
    (folder / f"main_job_{card}.json").write_text(json.dumps(main_job))


def test_verdicts_and_the_docs_section(tmp_path):
    results = tmp_path / "gpu-h100"
    _write(results, "h100")
    lines = verdicts.verdicts(results, "h100")
    text = "\n".join(lines)
    assert "fused / floor at 32K: 1.100 (target ≤ 1.2: met)" in text
    assert "fused peak at 32K: 2.00 GiB (target ≤ 5.0: met)" in text
    assert "fused peak at 256K: 10.50 GiB (target ≤ 11: met)" in text
    assert "N=8192 liger-fljsd / fused: memory 3.00×, time over floor 2.73× (fused less of both: met)" in text
    assert "N=32768 liger-distill / fused: memory 0.75×, time over floor 1.82× (fused less of both: NOT MET)" in text
    assert "e2e 8K step: fused 0.060 s, chunked 0.070 s (fused ≤ chunked: met)" in text
    assert "main job, teacher pass (random weights, 131072 tokens): 200000 tokens/s, 1.25× the bare forward's" in text
    assert "KD step 0.060 s, 1.20× a plain CE step" in text
    assert not text.startswith("REHEARSAL")
    verdicts.main([str(results), "h100"])
    found = lambda pattern: [(p.relative_to(tmp_path).as_posix(), make_docs.load(p))  # noqa: E731
                             for p in sorted(tmp_path.glob(pattern))]
    section = make_docs.gpu_check(found("gpu-*/verdicts_*.txt"), found("gpu-*/loss_*.jsonl"),
                                  found("gpu-*/precision_*.jsonl"), found("gpu-*/chunk_curve_*.jsonl"),
                                  found("gpu-*/e2e_8k_*.json"), found("gpu-*/main_job_*.json"))
    assert section.startswith("**gpu-h100**") and "- fused / floor at 32K: 1.100" in section
    assert "| KD step (fused) | 0.060 s | plain CE step 0.050 s | 1.20× |" in section
    assert "| 8192 | cce | error (boom) |" in section and "| fused | ok | 1.00 GiB | 0.060 s |" in section
    assert "Not measured yet" in make_docs.gpu_check([], [], [], [], [])


def test_a_rehearsal_computes_every_line_at_its_own_sizes_and_says_it_judges_nothing(tmp_path):
    results = tmp_path / "gpu-rehearsal"
    _write(results, "rehearsal")
    small = [{**r, "seq_len": r["seq_len"] // 8} for r in map(json.loads, (results / "loss_rehearsal.jsonl")
                                                                .read_text().splitlines())]
    (results / "loss_rehearsal.jsonl").write_text("".join(json.dumps(r) + "\n" for r in small))
    lines = verdicts.verdicts(results, "rehearsal")
    assert lines[0].startswith("REHEARSAL on CPU")
    assert any(line.startswith("fused / floor at 4K: 1.100") for line in lines)
    found = lambda pattern: [(p.relative_to(tmp_path).as_posix(), make_docs.load(p))  # noqa: E731
                             for p in sorted(tmp_path.glob(pattern))]
    # A rehearsal's figures never reach the docs as a GPU's.
    assert "Not measured yet" in make_docs.gpu_check(found("gpu-*/verdicts_*.txt"), found("gpu-*/loss_*.jsonl"),
                                                     [], [], [], [])
