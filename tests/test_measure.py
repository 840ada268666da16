"""run_isolated: peak memory above baseline, and every failure turned into a status."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from destila.eval.measure import run_isolated

HERE = Path(__file__).parent


@pytest.fixture(autouse=True)
def workers_on_path(monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))


def test_peak_counts_what_the_worker_allocates():
    small = run_isolated("measure_workers:allocate", {"mib": 1})
    large = run_isolated("measure_workers:allocate", {"mib": 300})
    assert small["status"] == large["status"] == "ok"
    assert large["result"]["mib"] == 300
    # The baseline excludes imports: 1 MiB shows as little, 300 MiB as ~300 MiB
    # (RSS also counts library pages, which the kernel may drop meanwhile).
    assert small["peak_bytes"] < 40 * 2**20
    assert 290 * 2**20 <= large["peak_bytes"] < 340 * 2**20


def test_allocation_beyond_the_limit_is_oom():
    report = run_isolated("measure_workers:allocate", {"mib": 2048}, memory_limit=256 * 2**20)
    assert report["status"] == "oom" and report["result"] is None
    assert "allocate" in report["error"]


def test_exception_is_error_with_its_message():
    report = run_isolated("measure_workers:boom", {"message": "no such key"})
    assert report["status"] == "error" and "KeyError" in report["error"] and "no such key" in report["error"]


def test_timeout_kills_the_child():
    report = run_isolated("measure_workers:sleep", {"seconds": 60}, timeout=3)
    assert report["status"] == "timeout" and report["wall_seconds"] < 20


def test_unknown_target_is_error():
    report = run_isolated("measure_workers:nothing_here", {})
    assert report["status"] == "error" and "nothing_here" in report["error"]


def test_worker_may_report_its_own_phase_peak():
    """A worker that restarts the peak around the phase it reports is charged for that phase only."""
    report = run_isolated("measure_workers:two_phases", {"charged_mib": 50, "free_mib": 300})
    assert report["status"] == "ok"
    assert 45 * 2**20 <= report["peak_bytes"] < 90 * 2**20
