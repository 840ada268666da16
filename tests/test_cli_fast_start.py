"""`destila --help`, `destila train --help` and `destila train`'s argument mistakes answer without importing torch
or transformers, from the light parser, which equals the live one for the installed transformers."""

import json
import os
import subprocess
import sys
import time

import pytest

from destila.cli.main import build_parser

HEAVY = ("torch", "transformers", "datasets")
WIDTH = "100"


def imported_by(argv: list[str], stream: str = "stdout", cwd=None) -> tuple[str, list[str], float]:
    """``(stdout or stderr, heavy modules imported, seconds)`` of ``destila ARGV`` run in a fresh interpreter; the
    modules are listed once the answer is printed (``main`` has exited)."""
    code = ("import sys\nfrom destila.cli.main import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in %r if m in sys.modules), file=sys.stderr)" % (argv, HEAVY))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
                          env={**os.environ, "COLUMNS": WIDTH}, cwd=cwd)
    seconds = time.perf_counter() - start
    err, _, heavy = done.stderr.rpartition("HEAVY ")
    return (done.stdout if stream == "stdout" else err), eval(heavy), seconds


def live_help(defaults: dict | None = None) -> str:
    from destila.cli.train import build_parser as build_train_parser

    saved = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = WIDTH
    try:
        parser = build_train_parser()
        parser.set_defaults(**(defaults or {}))
        return parser.format_help()
    finally:
        if saved is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = saved


def described(parser) -> list[tuple]:
    """Every argument as argparse holds it: flags, destination, kind, default, type, choices, help."""
    return [(tuple(a.option_strings), a.dest, type(a).__name__, repr(a.default), repr(a.const), a.nargs, a.required,
             tuple(a.choices) if a.choices is not None else None, a.metavar, a.help,
             getattr(a.type, "__name__", repr(a.type))) for a in parser._actions]


def test_destila_help_imports_no_heavy_module():
    text, heavy, _ = imported_by(["--help"])
    assert heavy == [] and "train     train a student from a cache" in text


def test_destila_train_help_imports_no_heavy_module_and_prints_the_live_help():
    text, heavy, seconds = imported_by(["train", "--help"])
    assert heavy == []
    assert text == live_help() and "--learning_rate" in text and "--use_peft" in text
    assert seconds < 60  # a loaded 2-core machine; the invariant is the modules above


def test_the_light_parser_is_the_live_parser_for_the_installed_transformers():
    from destila.cli.train import build_parser as build_train_parser
    from destila.cli.train_light import light_parser

    live, light = build_train_parser(), light_parser()
    assert described(light) == described(live)
    assert light.trl_flags == live.trl_flags
    assert light.format_help() == live.format_help()


def test_the_stored_flags_are_destilas_declarations():
    from destila.cli.train_light import STORED, write_record

    assert json.loads(STORED.read_text()) == write_record(), "write them again: python -m destila.cli.train_light"


@pytest.mark.parametrize("argv, line", [
    (["--learning_rate", "fast"], "argument --learning_rate/--learning-rate: invalid float value: 'fast'"),
    (["--lr_scheduler_type", "wavy"], "argument --lr_scheduler_type/--lr-scheduler-type: invalid choice: 'wavy'"),
    (["--max_steps", "0"], "max_steps: expected an integer ≥ 1, found 0"),
    (["--learning_rate=inf"], "learning_rate: expected a finite number, found inf"),
    (["--learnig_rate", "1e-3"], "unrecognized arguments: --learnig_rate 1e-3; did you mean --learning_rate?"),
])
def test_a_train_mistake_is_answered_before_transformers_is_imported(tmp_path, argv, line):
    err, heavy, seconds = imported_by(["train", "s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), *argv],
                                      stream="stderr")
    assert heavy == []
    assert err.strip().splitlines()[-1].startswith(f"destila train: error: {line}")
    assert seconds < 60


def test_a_missing_cache_is_answered_before_transformers_is_imported(tmp_path):
    err, heavy, _ = imported_by(["train", "s", "--cache", str(tmp_path / "nope"), "-o", str(tmp_path / "o")],
                                stream="stderr")
    assert heavy == []
    assert err.strip() == (f"destila train: error: cache: no such folder: {tmp_path / 'nope'}; expected a cache "
                           "folder, an export folder or a hub dataset id such as 'org/name'")


def test_train_help_with_a_config_shows_its_values_as_the_defaults(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("learning_rate: 0.002\nmax_steps: 7\n")
    text, heavy, _ = imported_by(["train", "--help", "--config", str(config)])
    assert heavy == []
    assert text == live_help({"learning_rate": 0.002, "max_steps": 7})
    assert "The initial learning rate for the optimizer. (default: 0.002)" in text


def test_a_config_value_is_refused_naming_the_file_line_and_key(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("seed: 3\nlearning_rate: fast\n")
    err, heavy, _ = imported_by(["train", "s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"),
                                 "--config", str(config)], stream="stderr")
    assert heavy == []
    assert err.strip() == (f"destila train: error: --config {config}, line 2: learning_rate: expected a number, "
                           "found 'fast'; fix the file (flags on the command line override it)")


def test_text_that_is_not_the_json_object_an_option_takes_is_one_line_naming_the_flag(tmp_path):
    err, heavy, _ = imported_by(["train", "s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"),
                                 "--lr_scheduler_kwargs", "{bad"], stream="stderr")
    assert heavy == []
    assert err.strip() == ("destila train: error: --lr_scheduler_kwargs: expected a JSON object such as "
                           "'{\"num_cycles\": 2}', found '{bad' (not JSON: Expecting property name enclosed in double "
                           "quotes at column 2)")


def test_the_command_list_without_the_modules_is_the_one_they_register():
    assert build_parser(only="").format_help() == build_parser().format_help()
