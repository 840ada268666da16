"""`destila bench e2e` on a tiny teacher: every method in its own process, same data, same seed."""

import json

import pytest

from conftest import pydoc_texts
from destila.bench import e2e
from destila.bench.e2e import E2EConfig, break_even_runs, budget_status, longest_fitting
from destila.cli.main import main as cli
from destila.eval import measure


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in pydoc_texts(6)))
    return path


# Every method is a fresh process (about 7 s of imports each). The command as users run it, every method it
# runs by default, on a tiny teacher: only the shapes, the data and the files are given.
def test_offline_methods_agree_and_online_is_compared(tiny_llama_dir, corpus, tmp_path, capsys):
    methods = E2EConfig.methods
    with pytest.raises(SystemExit) as done:
        cli(["bench", "e2e", "--teacher", str(tiny_llama_dir), "--student-layers", "2", "--data", str(corpus),
             "--seq-len", "32", "--batch-size", "2", "--steps", "3", "--top-k", "16", "--lr", "3e-3",
             "--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "e2e.json"),
             "--csv", str(tmp_path / "e2e.csv"), "--plot", str(tmp_path / "e2e.png")])
    assert done.value.code == 0
    result = json.loads((tmp_path / "e2e.json").read_text())
    assert (tmp_path / "e2e.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "e2e.csv").read_text().count("\n") == 5
    # Which way the verdict goes depends on the tiny model's step times (and the machine's load); that one is said does not.
    verdict = "caching pays for itself" if result["break_even_runs"] is not None else "caching does not pay back here"
    assert verdict in capsys.readouterr().out
    rows = {r["method"]: r for r in result["rows"]}
    assert [(r["method"], r["status"]) for r in result["rows"]] == [(m, "ok") for m in methods], result["rows"]
    for method in set(methods) & {"dense", "chunked"}:  # same sequences, same maths: only float rounding differs
        assert rows[method]["final_loss"] == pytest.approx(rows["fused"]["final_loss"], rel=1e-4)
        assert rows[method]["losses"] == pytest.approx(rows["fused"]["losses"], rel=1e-4)
    for row in rows.values():
        assert len(row["losses"]) == 3 and len(row["all_step_seconds"]) == 3 and row["peak_bytes"] > 0
        assert row["losses"] == pytest.approx(row["kl"], rel=1e-4)  # the KL alone, as TRL's GKD rows train
        assert row["tokens_per_second"] == pytest.approx(2 * 32 / row["step_seconds"])
    assert rows["fused"]["loss_diff_vs_online"] == pytest.approx(rows["fused"]["final_loss"]
                                                                 - rows["online"]["final_loss"])
    assert result["cache"]["tokens"] == 3 * 2 * 32 and result["cache"]["seconds"] > 0


def test_break_even_and_longest_fitting_arithmetic():
    rows = [{"method": "online", "status": "ok", "step_seconds": 3.0},
            {"method": "fused", "status": "ok", "step_seconds": 1.0}]
    assert break_even_runs(20.0, rows, steps=5) == pytest.approx(2.0)  # 20 s cache / (5 × 2 s saved)
    assert break_even_runs(20.0, rows[:1], steps=5) is None
    sweep = [{"impl": "dense", "seq_len": 2048, "status": "ok"}, {"impl": "fused", "seq_len": 2048, "status": "ok"},
             {"impl": "dense", "seq_len": 4096, "status": "oom"}, {"impl": "fused", "seq_len": 4096, "status": "ok"}]
    assert longest_fitting(sweep) == {"dense": 2048, "fused": 4096}


def test_a_step_that_completes_above_the_budget_did_not_fit():
    done = {"status": "ok", "peak_bytes": 9 * 2**30, "error": None}
    assert budget_status(done, 8 * 2**30, "cpu") == ("oom", "peak 9.00 GiB above the memory limit 8.00 GiB")
    assert budget_status({**done, "peak_bytes": 7 * 2**30}, 8 * 2**30, "cpu") == ("ok", None)
    assert budget_status(done, 8 * 2**30, "cuda") == ("ok", None)  # on GPU the card's memory is the limit
    failed = {"status": "oom", "peak_bytes": None, "error": "DefaultCPUAllocator: not enough memory"}
    assert budget_status(failed, 8 * 2**30, "cpu") == ("oom", failed["error"])


def _in_this_process(target, kwargs=None, *, device="cpu", **_limits):
    """:func:`run_isolated` without the child process: the child's own code (worker, baseline, peak), no address-space
    cap (it would bind the test process)."""
    report = measure._child({"target": target, "kwargs": kwargs or {}, "device": device, "memory_limit": None,
                             "threads": None})
    return {**report, "wall_seconds": 0.0}


# Three fresh processes (one per loss) cost about 25 s: by default the sweep's workers run in the test process, as
# measure._child runs them in a child; the real processes are checked here when slow (and by
# test_offline_methods_agree_and_online_is_compared and tests/test_measure.py by default).
@pytest.mark.parametrize("isolated", [pytest.param(False, id="in-process"),
                                      pytest.param(True, id="processes", marks=pytest.mark.slow)])
def test_cli_long_context_writes_json_csv_and_plot(tiny_llama_dir, tmp_path, capsys, monkeypatch, isolated):
    if not isolated:
        monkeypatch.setattr(measure, "run_isolated", _in_this_process)
        monkeypatch.setattr(e2e, "run_isolated", _in_this_process, raising=False)
    out = tmp_path / "long.json"
    with pytest.raises(SystemExit) as exit_info:
        cli(["bench", "e2e", "--long-context", "--teacher", str(tiny_llama_dir), "--student-layers", "1",
             "--seq-lens", "32", "--top-k", "8", "--workdir", str(tmp_path), "--json", str(out),
             "--csv", str(tmp_path / "long.csv"), "--plot", str(tmp_path / "long.png")])
    assert exit_info.value.code == 0
    payload = json.loads(out.read_text())
    assert [(r["impl"], r["seq_len"], r["status"]) for r in payload["rows"]] == [
        (impl, 32, "ok") for impl in ("dense", "chunked", "fused")]
    assert payload["longest"] == {"dense": 32, "chunked": 32, "fused": 32}
    assert (tmp_path / "long.png").read_bytes()[:4] == b"\x89PNG"
    assert "longest sequence that fits" in capsys.readouterr().out


def test_the_table_compares_with_online_only_when_online_ran():
    from rich.console import Console

    from destila.bench.tables import e2e_table

    cfg = E2EConfig(teacher="t", seq_len=32, batch_size=2)
    ok = {"status": "ok", "peak_bytes": 2**30, "step_seconds": 1.0, "tokens_per_second": 64.0, "final_loss": 2.0}
    without = {"rows": [{"method": "chunked", **ok}, {"method": "fused", **ok}]}
    with_online = {"rows": [{"method": "online", **ok, "step_seconds": 2.0},
                            {"method": "fused", **ok, "memory_vs_online": 0.5, "time_vs_online": 0.5,
                             "loss_diff_vs_online": 0.25}]}

    def rendered(result):
        console = Console(width=200, record=True)
        console.print(e2e_table(result, cfg))
        return [line for line in console.export_text().splitlines() if "fused" in line][0]

    assert "1.00×" not in rendered(without) and rendered(without).count("–") == 3
    assert "0.50×" in rendered(with_online) and "+0.2500" in rendered(with_online)


def test_the_rows_measured_so_far_are_on_disk_before_the_run_ends(tmp_path, capsys):
    from rich.console import Console

    from destila.cli.bench import keeping_rows

    path = tmp_path / "e2e.json"
    on_row = keeping_rows(Console(), lambda row: f"row {row['method']}", path, {"cpu": "x"})
    on_row({"method": "offline", "status": "ok"})
    assert json.loads(path.read_text()) == {"machine": {"cpu": "x"}, "rows": [{"method": "offline", "status": "ok"}],
                                            "unfinished": True}
    on_row({"method": "online", "status": "oom"})
    assert [r["method"] for r in json.loads(path.read_text())["rows"]] == ["offline", "online"]
    assert "row online" in capsys.readouterr().out
    keeping_rows(Console(), str, None, {})({"method": "x"})  # no file asked for: printed only
