"""`destila --help` and `destila train --help` answer without importing torch or transformers."""

import json
import subprocess
import sys

from destila.cli.main import build_parser
from destila.cli.stored_help import STORED, live_train_help, stored_train_help, versions

HEAVY = ("torch", "transformers", "datasets")


def imported_by(argv: list[str]) -> tuple[str, list[str]]:
    """``(stdout, heavy modules imported)`` of ``destila ARGV`` run in a fresh interpreter."""
    code = ("import sys\nfrom destila.cli.main import main\ntry:\n    main(%r)\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in %r if m in sys.modules))" % (argv, HEAVY))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True).stdout
    text, _, heavy = out.rpartition("HEAVY ")
    return text, eval(heavy)


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


def test_options_that_change_the_defaults_shown_take_the_live_parser():
    assert stored_train_help(["--help"]) is not None and stored_train_help(["-h"]) is not None
    assert stored_train_help(["--help", "--config", "c.yaml"]) is None
    assert stored_train_help(["--resume=x", "-h"]) is None and stored_train_help(["s", "--cache", "c"]) is None


def test_the_command_list_without_the_modules_is_the_one_they_register():
    assert build_parser(only="").format_help() == build_parser().format_help()
