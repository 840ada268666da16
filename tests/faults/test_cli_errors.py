"""Every user-caused failure is one line naming the file and the fix; `--debug` brings the traceback back.

Also: what a killed conversion of the embedded teacher leaves behind is
deleted by the next run.
"""

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import make_tiny_model, requires_real_teacher
from fault_helpers import (  # noqa: F401 (fixtures)
    ENV, build_command, destila, destila_in_process, error_line, small_cache,
)

STAGING = ".smollm2-135m-instruct-"


@pytest.fixture
def binary_txt(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(bytes(range(0x80, 0x100)) * 4)  # not UTF-8
    return path


def test_a_binary_txt_file_is_named(tiny_llama_dir, binary_txt, tmp_path):
    result = destila_in_process(*build_command(tiny_llama_dir, binary_txt, tmp_path / "cache"))
    error_line(result, "cache", 2, f"not UTF-8 text at {binary_txt}", "expected a UTF-8 .txt file")
    assert not (tmp_path / "cache").exists()


def test_debug_flag_and_environment_variable_show_the_traceback(tiny_llama_dir, binary_txt, tmp_path):
    for env, flag in ((ENV, ["--debug"]), ({**ENV, "DESTILA_DEBUG": "1"}, [])):
        result = destila(*flag, *build_command(tiny_llama_dir, binary_txt, tmp_path / "cache"), env=env)
        assert result.returncode == 1 and "Traceback (most recent call last)" in result.stderr
        assert f"ValueError: data: not UTF-8 text at {binary_txt}" in result.stderr


def test_student_init_into_an_impossible_folder_names_the_users_path(tiny_llama_dir):
    result = destila_in_process("student", "init", tiny_llama_dir, "-o", "/proc/x", "--layers", "2")
    line = error_line(result, "student", 2, "cannot write the student folder /proc/x")
    assert "/proc/." not in line  # no internal temporary name


def test_eval_with_a_student_of_another_vocabulary_is_one_line(small_cache, tiny_tokenizer, tmp_path):
    other = tmp_path / "other-vocab"
    make_tiny_model("gpt2", len(tiny_tokenizer) + 80, layers=1).save_pretrained(other)
    tiny_tokenizer.save_pretrained(other)
    result = destila_in_process("eval", other, "--cache", small_cache, "--max-tokens", "64", "--new-tokens", "2")
    error_line(result, "eval", 2, f"has a vocabulary of {len(tiny_tokenizer) + 80} tokens but the cache at "
               f"{small_cache} was made with {len(tiny_tokenizer)}")


def test_leftovers_of_a_killed_teacher_conversion_are_deleted_by_the_next_run(tmp_path):
    home = tmp_path / "home"
    target = home / "smollm2-135m-instruct"
    target.mkdir(parents=True)
    (target / "config.json").write_text("{}")
    (target / "model.safetensors").write_bytes(b"weights")
    for suffix in ("k2j4x_1a", "q9zz0t3b"):  # what tempfile.mkdtemp named the staging of two killed conversions
        leftover = home / f"{STAGING}{suffix}"
        leftover.mkdir()
        (leftover / "model.safetensors").write_bytes(b"\0" * 1_000_000)
    code = "from destila.models import embedded_teacher_dir; print(embedded_teacher_dir())"
    done = subprocess.run([sys.executable, "-c", code], env={**ENV, "DESTILA_HOME": str(home)},
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(target)  # (other libraries may print warnings first)
    # The staging leftovers are gone, and so is the conversion's lock file (".smollm2-135m-instruct.lock").
    assert sorted(p.name for p in home.iterdir()) == ["smollm2-135m-instruct"]
    assert (target / "model.safetensors").read_bytes() == b"weights"


@pytest.mark.slow
@pytest.mark.real_model
@requires_real_teacher
def test_a_conversion_killed_mid_write_is_cleaned_and_redone(tmp_path):
    home = tmp_path / "home"
    env = {**ENV, "DESTILA_HOME": str(home)}
    code = "from destila.models import embedded_teacher_dir; print(embedded_teacher_dir())"
    process = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while process.poll() is None and time.monotonic() < deadline:
            staging = list(home.glob(f"{STAGING}*")) if home.exists() else []
            if staging and any(p.is_file() for p in staging[0].iterdir()):
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.005)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
    assert list(home.glob(f"{STAGING}*")), "the conversion finished before it could be killed"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not list(home.glob(f"{STAGING}*"))
    converted = Path(done.stdout.strip().splitlines()[-1])  # (other libraries may print warnings first)
    assert (converted / "model.safetensors").is_file()
    assert os.path.getsize(converted / "model.safetensors") > 100_000_000


def test_an_address_space_limit_too_small_to_start_is_one_line_not_a_hang(tmp_path):
    import resource

    limit = 700 * 2**20  # below it OpenBLAS's start-up (imported with scipy) retries a failed mmap forever
    result = subprocess.run([sys.executable, "-m", "destila", "train", "student", "--cache", str(tmp_path / "cache"), "-o",
                             str(tmp_path / "out")], env=ENV, capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    error_line(result, "train", 1, "not enough address space to start: the process may reserve at most 0.68 GiB "
               "of address space (ulimit -v)", "ulimit -v unlimited")
    assert not (tmp_path / "out").exists()


def _modes(folder):
    return stat.S_IMODE(folder.stat().st_mode), {p.name: stat.S_IMODE(p.stat().st_mode) for p in folder.iterdir()}


def test_the_converted_teacher_gets_the_modes_of_any_file_the_user_creates(tiny_llama_dir, tmp_path, monkeypatch):
    """The conversion (GGUF reading aside: the tiny Llama stands in) left a 0700 folder with 0600 weights beside
    0644 files; an older conversion found in the home gets the same modes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from destila.models import loading

    gguf = tmp_path / "package" / "model.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"")
    monkeypatch.setattr(loading, "embedded_gguf_path", lambda: gguf)
    monkeypatch.setattr(loading, "_load_gguf", lambda folder, name: (
        AutoModelForCausalLM.from_pretrained(tiny_llama_dir), AutoTokenizer.from_pretrained(tiny_llama_dir)))
    umask = os.umask(0o022)
    try:
        target = loading.embedded_teacher_dir(tmp_path / "home")
        folder, files = _modes(target)
        assert folder == 0o755 and "model.safetensors" in files and set(files.values()) == {0o644}, (folder, files)
        os.chmod(target / "model.safetensors", 0o600)
        os.chmod(target, 0o700)
        assert loading.embedded_teacher_dir(tmp_path / "home") == target
        assert _modes(target) == (folder, files)
    finally:
        os.umask(umask)
