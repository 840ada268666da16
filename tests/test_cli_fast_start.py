"""`destila --help` and `destila train --help` answer without importing torch or transformers."""

import json
import subprocess
import sys

from destila.cli.main import build_parser
from destila.cli.stored_help import STORED, early_train_error, live_train_flags, live_train_help, stored_train_help
from destila.cli.stored_help import versions

HEAVY = ("torch", "transformers", "datasets")


def imported_by(argv: list[str], stream: str = "stdout") -> tuple[str, list[str]]:
    """``(stdout or stderr, heavy modules imported)`` of ``destila ARGV`` run in a fresh interpreter."""
    code = ("import sys\nfrom destila.cli.main import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in %r if m in sys.modules), file=sys.stderr)" % (argv, HEAVY))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    err, _, heavy = done.stderr.rpartition("HEAVY ")
    return (done.stdout if stream == "stdout" else err), eval(heavy)


def test_destila_help_imports_no_heavy_module():
    text, heavy = imported_by(["--help"])
    assert heavy == [] and "train     train a student from a cache" in text


def test_destila_train_help_imports_no_heavy_module_and_prints_the_live_help():
    text, heavy = imported_by(["train", "--help"])
    assert heavy == []
    assert text == json.loads(STORED.read_text())["help"] and "--learning_rate" in text and "--use_peft" in text


def test_the_stored_train_help_is_the_live_parsers():
    record = json.loads(STORED.read_text())
    assert record["versions"] == versions(), "write it again: python -m destila.cli.stored_help"
    assert record["help"] == live_train_help(), "write it again: python -m destila.cli.stored_help"
    assert record["flags"] == live_train_flags(), "write it again: python -m destila.cli.stored_help"


def test_a_misspelt_train_flag_is_answered_before_transformers_is_imported():
    err, heavy = imported_by(["train", "s", "--cache", "c", "-o", "o", "--learnig_rate", "1e-3"], stream="stderr")
    assert heavy == []
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: destila train STUDENT")
    assert lines[1] == "destila train: error: unrecognized arguments: --learnig_rate; did you mean --learning_rate?"
    # Known flags, their other spelling and abbreviations argparse accepts go on to the full parser.
    assert early_train_error(["s", "--learning-rate", "1", "--learning_r", "1", "--model_name_or_path", "s"]) is None
    assert early_train_error(["s", "--", "--not-a-flag"]) is None


def test_options_that_change_the_defaults_shown_take_the_live_parser():
    assert stored_train_help(["--help"]) is not None and stored_train_help(["-h"]) is not None
    assert stored_train_help(["--help", "--config", "c.yaml"]) is None
    assert stored_train_help(["--resume=x", "-h"]) is None and stored_train_help(["s", "--cache", "c"]) is None


def test_the_command_list_without_the_modules_is_the_one_they_register():
    assert build_parser(only="").format_help() == build_parser().format_help()
