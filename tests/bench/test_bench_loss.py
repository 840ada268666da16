"""`destila bench loss` end to end on tiny shapes: rows, statuses, JSON, CSV and PNG."""

from __future__ import annotations

import csv
import json

import pytest

from destila.bench.loss import LossBenchConfig, predicted_bytes
from destila.cli.main import main

KEYS = {"impl", "seq_len", "hidden", "vocab", "top_k", "dtype", "device", "status", "peak_bytes", "seconds",
        "floor_seconds", "command", "torch", "cpu"}


def test_tiny_sweep_through_the_cli(tmp_path, capsys):
    shape = dict(hidden=32, vocab=256, top_k=4, chunk_size=32)
    cfg = LossBenchConfig(**shape, seq_lens=(64, 128))
    # A budget between dense's needs at 64 and at 128 rows: dense 128 is skipped.
    budget = (predicted_bytes("dense", 64, cfg) + predicted_bytes("dense", 128, cfg)) // 2
    out = {ext: tmp_path / f"loss.{ext}" for ext in ("jsonl", "csv", "png")}
    with pytest.raises(SystemExit) as done:
        main(["bench", "loss", "--hidden", "32", "--vocab", "256", "--top-k", "4", "--chunk-size", "32",
              "--seq-lens", "64,128", "--impls", "fused,dense", "--repeats", "2",
              "--memory-budget", str(budget / 2**30), "--json", str(out["jsonl"]), "--csv", str(out["csv"]),
              "--plot", str(out["png"])])
    assert done.value.code == 0
    rows = [json.loads(line) for line in out["jsonl"].read_text().splitlines()]
    assert [(r["impl"], r["seq_len"]) for r in rows] == [
        ("floor", 64), ("fused", 64), ("dense", 64), ("floor", 128), ("fused", 128), ("dense", 128)]
    assert all(KEYS <= set(r) for r in rows)
    status = {(r["impl"], r["seq_len"]): r for r in rows}
    assert status[("dense", 128)]["status"] == "skipped" and "budget" in status[("dense", 128)]["error"]
    for key, row in status.items():
        if key == ("dense", 128):
            assert row["peak_bytes"] is None and row["seconds"] is None
            continue
        assert row["status"] == "ok", row
        assert row["peak_bytes"] > 0 and row["seconds"] > 0 and row["repeats_done"] >= 1
        assert row["sweep_floor_seconds"] == status[("floor", row["seq_len"])]["seconds"]
        # Each impl's process times the floor after each of its own runs.
        assert len(row["floor_times"]) == row["repeats_done"] and row["floor_seconds"] > 0
        assert row["ratio_to_floor"] == pytest.approx(row["seconds"] / row["floor_seconds"])
    with open(out["csv"]) as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and table[5]["status"] == "skipped"
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    printed = capsys.readouterr().out
    assert "skipped" in printed and "fused/floor time" in printed


def test_the_default_sweep_runs_with_the_loss_choosing_its_chunk(tmp_path):
    """`destila bench loss` as documented, every default kept (impls, chunk size, repeats) but the shapes."""
    out = tmp_path / "loss.jsonl"
    with pytest.raises(SystemExit) as done:
        main(["bench", "loss", "--hidden", "32", "--vocab", "256", "--top-k", "4", "--seq-lens", "128",
              "--json", str(out)])
    assert done.value.code == 0
    rows = {r["impl"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert list(rows) == ["floor", "fused", "chunked", "dense"]
    for row in rows.values():
        assert row["status"] == "ok" and row["seconds"] > 0 and row["peak_bytes"] > 0 and row["repeats_done"] == 3
    # No --chunk-size: the loss's own choice (here every row at once), recorded with the path that ran.
    assert rows["fused"]["chunk_size"] == rows["floor"]["chunk_size"] == 128
    assert "chunk 128 rows" in rows["fused"]["path"]


def test_oom_stops_larger_sizes_of_that_impl(monkeypatch):
    """An impl that runs out of memory at N is not tried again at larger N."""
    import destila.bench.loss as loss

    calls = []

    def fake_run_isolated(target, kwargs, **_):
        calls.append((kwargs["impl"], kwargs["seq_len"]))
        if kwargs["impl"] == "dense" and kwargs["seq_len"] >= 128:
            return {"status": "oom", "peak_bytes": None, "error": "can't allocate memory", "result": None,
                    "wall_seconds": 0.1}
        return {"status": "ok", "peak_bytes": 1, "error": None, "wall_seconds": 0.1,
                "result": {"seconds": 1.0, "times": [1.0], "repeats_done": 1, "floor_seconds": 0.5}}

    monkeypatch.setattr(loss, "run_isolated", fake_run_isolated)
    rows = loss.run_loss_sweep(loss.LossBenchConfig(hidden=8, vocab=64, top_k=2, seq_lens=(64, 128, 256),
                                                    impls=("fused", "dense")))
    assert ("dense", 256) not in calls
    got = {(r["impl"], r["seq_len"]): r["status"] for r in rows}
    assert got[("dense", 128)] == "oom" and got[("dense", 256)] == "skipped" and got[("fused", 256)] == "ok"


def test_bad_arguments_are_errors(capsys):
    with pytest.raises(SystemExit) as done:
        main(["bench", "loss", "--seq-lens", "2K,lots"])
    assert done.value.code == 2 and "2048 or 4K" in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        main(["bench", "loss", "--impls", "fused,magic"])
    assert done.value.code == 2 and "impls" in capsys.readouterr().err


def test_other_rows_join_the_sweep_measured_alike(monkeypatch):
    """Rows from outside the package (the peers' losses) run after destila's at each N, through their own worker."""
    import destila.bench.loss as loss

    calls = []

    def fake_run_isolated(target, kwargs, **_):
        calls.append((target, kwargs.get("impl") or kwargs.get("name"), kwargs["seq_len"]))
        return {"status": "ok", "peak_bytes": 1, "error": None, "wall_seconds": 0.1,
                "result": {"seconds": 1.0, "times": [1.0], "repeats_done": 1, "floor_seconds": 0.5}}

    class Others:
        names, worker = ("toy", "absent"), "elsewhere:worker"

        def configure(self, name, n, cfg):
            if name == "absent":
                return {"inputs": "none"}, None, "not installed"
            return {"inputs": "logits"}, {"name": name, "seq_len": n}, None

        def columns(self, impl):
            return {"inputs": f"destila {impl}"}

    monkeypatch.setattr(loss, "run_isolated", fake_run_isolated)
    rows = loss.run_loss_sweep(loss.LossBenchConfig(hidden=8, vocab=64, top_k=2, seq_lens=(64,), impls=("fused",)),
                               others=Others())
    assert [(r["impl"], r["status"], r["inputs"]) for r in rows] == [
        ("floor", "ok", "destila floor"), ("fused", "ok", "destila fused"), ("toy", "ok", "logits"),
        ("absent", "unavailable", "none")]
    assert calls[-1] == ("elsewhere:worker", "toy", 64) and rows[-1]["error"] == "not installed"
    assert rows[2]["ratio_to_floor"] == 2.0


def test_each_measured_row_is_on_disk_before_the_sweep_ends(tmp_path, capsys):
    """A sweep stopped at a larger N (a time limit, a crash) keeps the rows it finished."""
    from destila.bench import row_printer

    out = tmp_path / "loss.jsonl"
    out.write_text('{"stale": true}\n')  # a previous sweep's file is replaced, not appended to
    on_row = row_printer(out)
    assert out.read_text() == ""
    row = {"impl": "fused", "seq_len": 64, "status": "ok", "peak_bytes": 1, "seconds": 0.5, "floor_seconds": 0.4,
           "ratio_to_floor": 1.25, "error": None}
    on_row(row)
    assert [json.loads(line) for line in out.read_text().splitlines()] == [row]
    on_row({**row, "seq_len": 128})
    assert len(out.read_text().splitlines()) == 2 and "fused" in capsys.readouterr().out


def test_a_configuration_that_crashed_makes_the_command_fail(monkeypatch, tmp_path, capsys):
    """A sweep whose row crashed measured nothing there: the command says which and exits 1 (a script running it,
    as the GPU check does, sees a failed step), after writing every row."""
    from destila.bench import loss

    def crashing(worker, kwargs, **_options):
        return {"status": "error", "peak_bytes": None, "error": "SyntaxError: invalid syntax", "result": None,
                "wall_seconds": 0.1}

    monkeypatch.setattr(loss, "run_isolated", crashing)
    out = tmp_path / "loss.jsonl"
    with pytest.raises(SystemExit) as done:
        main(["bench", "loss", "--hidden", "32", "--vocab", "256", "--top-k", "4", "--seq-lens", "64",
              "--impls", "fused", "--json", str(out)])
    assert done.value.code == 1
    assert "bench: fused at 64: error: SyntaxError: invalid syntax" in capsys.readouterr().err
    assert [json.loads(line)["status"] for line in out.read_text().splitlines()] == ["error", "error"]
