"""Run a `destila` command line inside the test process and see what a fresh process would show.

``run_in_process(argv)`` returns the ``subprocess.CompletedProcess`` that
``python -m destila ARGV`` gives: the exit code, stdout and stderr as text.
Naive equivalent: ``subprocess.run([sys.executable, "-m", "destila", *argv],
capture_output=True, text=True)``, which spends seconds importing torch and
transformers again for every command.

Faithful where the fault tests look:

- exit code: ``destila.cli.main.main`` ends in ``sys.exit``; an exception
  that escapes it is printed as Python prints an uncaught one (a
  ``Traceback`` on stderr, exit code 1), so "no traceback" fails when it should;
- output: ``sys.stdout``/``sys.stderr`` and file descriptors 1 and 2 (C and
  Rust libraries) are captured;
- logging: the root logger starts without handlers, as in a fresh process,
  so a command's ``logging.basicConfig`` and ``logging.lastResort`` write to
  the captured stderr; warnings are printed there too, not kept by pytest;
- nothing leaks into the next test: environment (``DESTILA_DEBUG`` removed
  for the run, as the subprocess environment does), working folder, root
  logger, transformers' verbosity and bars, torch's thread count and random
  states, open tqdm bars are all put back.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import random
import subprocess
import sys
import tempfile
import traceback
import warnings

import numpy
import torch

# What a fresh interpreter filters (no -W, no dev mode): pytest's own filters would turn some into errors.
_FRESH_WARNING_FILTERS = [
    ("default", None, DeprecationWarning, "__main__", 0),
    ("ignore", None, DeprecationWarning, None, 0),
    ("ignore", None, PendingDeprecationWarning, None, 0),
    ("ignore", None, ImportWarning, None, 0),
    ("ignore", None, ResourceWarning, None, 0),
]


def run_in_process(argv: list[str]) -> subprocess.CompletedProcess:
    from destila.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with _restored_state(), _captured_fds() as fds, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _exit_code(main, argv)
    return subprocess.CompletedProcess(["destila", *argv], code, out.getvalue() + fds.stdout,
                                       err.getvalue() + fds.stderr)


def _exit_code(main, argv: list[str]) -> int:
    """Run ``main(argv)`` as the interpreter would: SystemExit's code, or 1 and the traceback printed."""
    try:
        main(argv)
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            return done.code or 0
        print(done.code, file=sys.stderr)
        return 1
    except BaseException:  # uncaught in a real process: Python prints the traceback and exits with 1
        sys.stderr.write(traceback.format_exc())
        return 1
    return 0


class _FdText:
    stdout = stderr = ""


@contextlib.contextmanager
def _captured_fds():
    """File descriptors 1 and 2 point to temporary files for the block; their text is read afterwards."""
    texts = _FdText()
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile() as out_file, tempfile.TemporaryFile() as err_file:
        saved = os.dup(1), os.dup(2)
        os.dup2(out_file.fileno(), 1)
        os.dup2(err_file.fileno(), 2)
        try:
            yield texts
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            texts.stdout, texts.stderr = (_read(f) for f in (out_file, err_file))


def _read(handle) -> str:
    handle.seek(0)
    return handle.read().decode("utf-8", "replace")


@contextlib.contextmanager
def _restored_state():
    environment, cwd = dict(os.environ), os.getcwd()
    os.environ.pop("DESTILA_DEBUG", None)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    root.handlers = []
    threads = torch.get_num_threads()
    rng = torch.random.get_rng_state(), random.getstate(), numpy.random.get_state()
    libraries = _library_settings()
    bars = _open_bars()
    try:
        with warnings.catch_warnings():
            warnings.filters[:] = list(_FRESH_WARNING_FILTERS)
            warnings.showwarning = _print_warning
            yield
    finally:
        for handler in root.handlers:  # those a command's basicConfig added, on the captured stderr
            handler.close()
        root.handlers, root.level = handlers, level
        _restore_library_settings(libraries)
        for bar in _open_bars() - bars:
            bar.close()
        torch.random.set_rng_state(rng[0])
        random.setstate(rng[1])
        numpy.random.set_state(rng[2])
        torch.set_num_threads(threads)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(environment)


def _print_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def _open_bars() -> set:
    std = sys.modules.get("tqdm.std")
    return set(getattr(getattr(std, "tqdm", None), "_instances", ()))


def _library_settings() -> dict:
    """The command line turns transformers' bars off (destila.quiet) and the Trainer may set its verbosity."""
    import destila.quiet
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    return {"bars_off": destila.quiet._bars_off, "hf_bars": hf_logging.is_progress_bar_enabled(),
            "hub_bars_off": hub_utils.are_progress_bars_disabled(), "verbosity": hf_logging.get_verbosity()}


def _restore_library_settings(saved: dict) -> None:
    import destila.quiet
    from huggingface_hub import utils as hub_utils
    from transformers.utils import logging as hf_logging

    destila.quiet._bars_off = saved["bars_off"]
    (hf_logging.enable_progress_bar if saved["hf_bars"] else hf_logging.disable_progress_bar)()
    (hub_utils.disable_progress_bars if saved["hub_bars_off"] else hub_utils.enable_progress_bars)()
    hf_logging.set_verbosity(saved["verbosity"])
