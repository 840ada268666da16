"""Real processes and real files: SIGKILL at several points then resume, a full disk, torchrun.

Every build here runs ``python -m destila cache build`` in a subprocess with
one thread, so its floating-point results are bit-for-bit those of the
in-process reference build (also one thread, see conftest).
"""

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time

import psutil
import pytest
import torch
from conftest import ENV, run_and_kill, save_tiny_model

from destila.cache import TopKCache, build_cache, read_manifest, verify_cache

ARGS = ["--seq-len", "64", "--max-tokens", "8000", "--top-k", "12", "--shard-size", "3", "--batch-size", "1"]
KWARGS = dict(seq_len=64, max_tokens=8000, top_k=12, shard_size=3, batch_size=1, progress=False)


@pytest.fixture(scope="module")
def slow_teacher(tmp_path_factory, tiny_tokenizer):
    """A tiny Llama a bit wider than conftest's, so a build lasts long enough to be killed mid-way."""
    path = tmp_path_factory.mktemp("slow-llama")
    save_tiny_model(path, tiny_tokenizer, layers=6, hidden=128)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory, slow_teacher):
    path = tmp_path_factory.mktemp("reference") / "c"
    build_cache(str(slow_teacher), "pydoc", path, **KWARGS)
    return path


def command(teacher, out, *extra):
    return [sys.executable, "-m", "destila", "cache", "build", str(teacher), "pydoc", "-o", str(out), *ARGS, "--quiet", *extra]


def recorded_shards(folder) -> int:
    try:
        return len(read_manifest(folder).shards)
    except (FileNotFoundError, ValueError):
        return -1



def assert_same_cache(got, want):
    a, b = read_manifest(got), read_manifest(want)
    assert a.content() == b.content() and a.complete and b.complete
    assert [(s.name, s.rows, s.sha256) for s in a.shards] == [(s.name, s.rows, s.sha256) for s in b.shards]
    for i in range(a.sequences):
        x, y = TopKCache(got)[i], TopKCache(want)[i]
        assert all(torch.equal(x[k], y[k]) for k in x), i


def kill_after(out, shards: int, delay: float):
    """A ``when`` for :func:`run_and_kill`: ``delay`` seconds after ``shards`` shards are recorded."""
    seen = {}

    def when():
        if recorded_shards(out) >= shards:
            seen.setdefault("at", time.monotonic())
            return time.monotonic() - seen["at"] >= delay
        return False

    return when


def finish_and_compare(teacher, out, reference, *extra):
    finished = subprocess.run(command(teacher, out, *extra), env=ENV, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr
    assert "resumed after" in finished.stdout
    assert_same_cache(out, reference)


def test_sigkill_mid_pass_then_resume_equals_an_uninterrupted_build(slow_teacher, reference, tmp_path):
    out = tmp_path / "c"
    total = len(read_manifest(reference).shards)
    assert run_and_kill(command(slow_teacher, out), kill_after(out, total // 3, 0.02)), "ended before the kill"
    assert 0 < recorded_shards(out) < total
    finish_and_compare(slow_teacher, out, reference)


def test_sigkill_mid_compact_build_then_resume_is_byte_identical(slow_teacher, tmp_path_factory, tmp_path):
    reference = tmp_path_factory.mktemp("compact-reference") / "c"
    build_cache(str(slow_teacher), "pydoc", reference, encoding="compact", **KWARGS)
    out = tmp_path / "c"
    total = len(read_manifest(reference).shards)
    compact = ("--encoding", "compact")
    assert run_and_kill(command(slow_teacher, out, *compact), kill_after(out, total // 2, 0.01)), "ended before the kill"
    assert 0 < recorded_shards(out) < total
    finish_and_compare(slow_teacher, out, reference, *compact)  # every shard's SHA-256 equal
    assert verify_cache(out).ok


@pytest.mark.slow
def test_sigkill_at_several_points_then_resume_equals_an_uninterrupted_build(slow_teacher, reference, tmp_path):
    out = tmp_path / "c"
    total = len(read_manifest(reference).shards)
    # right after the folder and manifest appear (tokenizer copy and model load under way)
    assert run_and_kill(command(slow_teacher, out), lambda: (out / "manifest.json").exists())
    # as soon as a shard is recorded, then at several moments a few milliseconds after one
    points = ((1, 0.0), (total // 4, 0.005), (total // 2, 0.015), (3 * total // 4, 0.030), (total - 1, 0.0))
    for shards, delay in points:
        assert run_and_kill(command(slow_teacher, out), kill_after(out, shards, delay)), "ended before the kill"
        assert 0 < recorded_shards(out) < total
    finish_and_compare(slow_teacher, out, reference)


def test_full_disk_is_a_clear_error_and_keeps_the_recorded_shards(slow_teacher, reference, tmp_path):
    out = tmp_path / "c"
    shutil.copytree(reference, out)
    manifest = read_manifest(out)
    kept = manifest.shards[:5]
    manifest.shards, manifest.complete = kept, False
    (out / "manifest.json").write_text(manifest.to_json())

    def limit_file_size():  # files may not grow past 20 kB: a 48-sequence shard cannot be written
        resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # fail the write with EFBIG instead of killing

    failed = subprocess.run(
        command(slow_teacher, out, "--shard-size", "48"), env=ENV, capture_output=True, text=True,
        preexec_fn=limit_file_size,
    )
    assert failed.returncode == 1, failed.stderr
    assert "could not write to the cache folder" in failed.stderr and "intact" in failed.stderr
    assert "Traceback" not in failed.stderr
    assert [s.sha256 for s in read_manifest(out).shards] == [s.sha256 for s in kept]
    report = verify_cache(out)
    assert len(report.faults) == 1 and "incomplete" in report.faults[0]  # every recorded shard is sound
    assert not any(".tmp-" in p.name for p in out.iterdir())


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_unwritable_folder_is_a_clear_error_and_keeps_the_shards(slow_teacher, reference, tmp_path):
    out = tmp_path / "c"
    shutil.copytree(reference, out)
    manifest = read_manifest(out)
    (out / manifest.shards[-1].name).unlink()  # one shard to redo
    os.chmod(out, 0o500)
    try:
        result = subprocess.run(command(slow_teacher, out), env=ENV, capture_output=True, text=True)
    finally:
        os.chmod(out, 0o700)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "cannot create or write the cache folder" in result.stderr or "could not write" in result.stderr
    assert all((out / s.name).is_file() for s in manifest.shards[:-1])


def test_torchrun_two_processes_equal_one_process(tiny_llama_dir, tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the Python interpreter")
    single = tmp_path / "one"
    options = dict(seq_len=32, max_tokens=32 * 28, top_k=12, shard_size=4, batch_size=2, progress=False)
    build_cache(str(tiny_llama_dir), "pydoc", single, **options)
    double = tmp_path / "two"
    result = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "destila", "cache", "build", str(tiny_llama_dir),
         "pydoc", "-o", str(double), "--seq-len", "32", "--max-tokens", str(32 * 28), "--top-k", "12",
         "--shard-size", "4", "--batch-size", "2", "--quiet"],
        env=ENV, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    # each rank took whole blocks of 4 consecutive sequences, in the micro-batches of one process: the same shards
    assert_same_cache(double, single)
    assert verify_cache(double).ok and not list(double.glob("progress-rank*.json"))
    assert (double / "manifest.json").read_bytes() == (single / "manifest.json").read_bytes()


@pytest.mark.slow
@pytest.mark.parametrize("resume_processes", [1, 2])
def test_torchrun_killed_unequally_advanced_then_resumed_equals_one_process(slow_teacher, reference, tmp_path,
                                                                            resume_processes):
    """A two-process build killed with its ranks unequally advanced, resumed by one or two processes:
    the progress files are merged and the shards are those of an uninterrupted one-process build."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the Python interpreter")
    out = tmp_path / "c"
    two = [torchrun, "--standalone", "--nproc-per-node", "2", *command(slow_teacher, out)[1:]]
    proc = subprocess.Popen(two, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            if len(set(progress_counts(out))) == 2:  # both ranks recorded shards, not as many
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the two-process build ended before it could be killed"
        # torchrun starts each rank in its own session: kill the agent and every rank, as a power cut would.
        family = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        for member in family:
            member.send_signal(signal.SIGKILL)
        psutil.wait_procs(family, timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    counts = progress_counts(out)
    assert len(counts) == 2 and 0 not in counts and recorded_shards(out) == 0  # only in the progress files so far
    resume = command(slow_teacher, out) if resume_processes == 1 else two
    finished = subprocess.run(resume, env=ENV, capture_output=True, text=True)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"resumed after {sum(counts) * 3:,} stored" in finished.stdout
    assert not list(out.glob("progress-rank*.json")) and verify_cache(out).ok
    assert_same_cache(out, reference)  # every shard's name, rows and SHA-256
    assert (out / "manifest.json").read_bytes() == (reference / "manifest.json").read_bytes()


def progress_counts(folder) -> list[int]:
    """The number of shards each rank's progress file records (one entry per file present)."""
    counts = []
    for path in sorted(folder.glob("progress-rank*.json")) if folder.exists() else []:
        try:
            counts.append(len(json.loads(path.read_text())["shards"]))
        except (OSError, ValueError):  # deleted by rank 0's merge between the glob and the read
            continue
    return counts
