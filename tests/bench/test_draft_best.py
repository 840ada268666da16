"""The draft benchmark's best draft, measured again with its extra settings: the draft fastest over its seeds, not
the one seed whose baseline a load happened to slow."""

from benchmarks.draft_models import _best
from destila.io.json_lines import append_json_line


def _record(row, layers, seed, speedup, **changes):
    return {"row": row, "layers": layers, "seed": seed, "draft_vocab": 64, "proposals": 1, "matmul": "timed",
            "temperature": 0.0, "speedup": speedup, **changes}


def test_the_best_draft_is_the_fastest_by_its_mean_over_seeds(tmp_path):
    out = tmp_path / "rows.jsonl"
    for record in (_record("kd-answers", 4, 0, 0.96), _record("kd-answers", 4, 1, 1.12),  # one flattered seed
                   _record("kd-answers-16x", 2, 0, 1.09), _record("kd-answers-16x", 2, 1, 1.08),
                   _record("kd-answers-16x", 2, 0, 1.50, matmul="torch"),  # an extra setting, not a candidate
                   _record("ce-answers-16x", 2, 0, 1.30)):  # not a KD row
        append_json_line(out, record)
    best = _best(out, "kd-answers")
    assert (best["row"], best["layers"], best["seed"]) == ("kd-answers-16x", 2, 0)
    assert _best(out, "nothing") is None
