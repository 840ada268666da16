"""The progress of a model evaluated in another process reaches the parent's bar."""

import time

import pytest

from destila.eval.progress import ProgressFile, read_progress, run_with_progress


class RecordingBar:
    """The part of a ``tqdm`` bar that run_with_progress drives, recording every redraw."""

    def __init__(self):
        self.updates, self.n, self.total, self.description = [], 0, None, ""

    def set_description_str(self, description, refresh=True):
        self.description = description

    def refresh(self):
        self.updates.append({"description": self.description, "total": self.total, "completed": self.n})


def test_the_bar_follows_the_states_the_worker_writes(tmp_path):
    path = tmp_path / "progress"
    report = ProgressFile(path)
    assert read_progress(path) is None

    def work():
        for done in range(4):
            report(done, 3, "scoring 12 sequences")
            time.sleep(0.15)
        return "result"

    bar = RecordingBar()
    assert run_with_progress(work, path, bar, "model 1/1 tiny", poll_seconds=0.02) == "result"
    seen = [u for u in bar.updates if "scoring" in u.get("description", "")]
    assert seen and {u["total"] for u in seen} == {3}
    assert [u["completed"] for u in seen] == sorted(u["completed"] for u in seen)  # never goes backwards
    assert bar.updates[-1]["description"] == "model 1/1 tiny: done"
    assert read_progress(path) == (3, 3, "scoring 12 sequences")


def test_a_worker_failure_reaches_the_caller(tmp_path):
    def work():
        raise ValueError("eval: bad input")

    bar = RecordingBar()
    with pytest.raises(ValueError, match="bad input"):
        run_with_progress(work, tmp_path / "progress", bar, "model", poll_seconds=0.01)
    assert bar.updates[-1]["description"] == "model: failed"


def test_a_failed_result_ends_the_bar_on_failed_not_done(tmp_path):
    """An isolated worker returns its failure as a result; the bar must not say done before the error."""
    path = tmp_path / "progress"

    def work():
        ProgressFile(path)(1, 4, "loading")
        time.sleep(0.1)
        return {"status": "error"}

    bar = RecordingBar()
    run_with_progress(work, path, bar, "model 1/1 x", poll_seconds=0.02, succeeded=lambda r: r["status"] == "ok")
    assert bar.updates[-1]["description"] == "model 1/1 x: failed"
    assert all("done" not in u["description"] for u in bar.updates)
    assert bar.updates[-1]["completed"] == 1  # where it stopped, not 100%


def test_without_a_file_reporting_does_nothing():
    ProgressFile(None)(1, 2, "anything")


def test_a_real_tqdm_bar_ends_on_done(tmp_path):
    import io

    from tqdm import tqdm

    path, shown = tmp_path / "progress", io.StringIO()

    def work():
        ProgressFile(path)(2, 5, "scoring 5 sequences")
        time.sleep(0.1)
        return "result"

    with tqdm(file=shown, unit="batch") as bar:
        assert run_with_progress(work, path, bar, "model 1/1 tiny", poll_seconds=0.02) == "result"
    text = shown.getvalue()
    assert "model 1/1 tiny: scoring 5 sequences" in text and "2/5" in text
    assert text.rstrip().splitlines()[-1].lstrip("\r").startswith("model 1/1 tiny: done")
