"""Every `destila …` command shown in README.md and docs/*.md is accepted by the real command-line parser,
and so is every `python -m benchmarks.peers …` command (the peer comparisons beside the package) and every
`python benchmarks/SCRIPT.py …` command (each script's ``build_parser()``).

The commands are parsed, not run (running them is what the other tests and
the benchmarks do): a flag renamed in the code and not in the docs, a wrong
choice or a value of the wrong type fails here, naming the doc and line.
"""

from __future__ import annotations

import contextlib
import functools
import io
import re
import shlex
from importlib import import_module
from pathlib import Path

import pytest

from destila.cli import main as cli_main

ROOT = Path(__file__).resolve().parent.parent
_FENCE = re.compile(r"^\s*```(\w*)\s*$")
# `torchrun … -m destila ARGS` runs the same command line as `destila ARGS`.
# Output shown in a block ("destila cache: error: …") is not a command: the verb must be a plain word.
_ENTRY = re.compile(r"^(?:torchrun\s.*?-m\s+destila|(?:\.venv/bin/)?destila|python\s+-m\s+destila)\s+([a-z][a-z-]*(?:\s.*)?)$")
_PEERS = re.compile(r"^python\s+-m\s+benchmarks\.peers\s+([a-z][a-z0-9-]*(?:\s.*)?)$")
_SCRIPTS = re.compile(r"^python\s+(benchmarks/[a-z_]+\.py(?:\s.*)?)$")


def shown_commands(doc: Path, entry: re.Pattern = _ENTRY) -> list[tuple[int, str]]:
    """``(line, command)`` for each `destila` command line (``entry``) in the doc's bash/sh blocks (continuations
    joined)."""
    found, fenced, language, pending, start = [], False, "", "", 0
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), start=1):
        fence = _FENCE.match(line)
        if fence:
            fenced, language = not fenced, fence.group(1) if not fenced else ""
            continue
        if not fenced or language not in ("bash", "sh", "shell", "console", ""):
            continue
        if not pending:
            start = number
        pending += line.rstrip()
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        for part in re.split(r"\s+(?:&&|;)\s+", pending):
            code = part.split(" #", 1)[0].strip()  # a trailing comment
            match = entry.match(code)
            if match and not code.startswith("python -m destila."):
                found.append((start, match.group(1)))
        pending = ""
    return found


def all_commands(entry: re.Pattern = _ENTRY) -> list[tuple[str, str]]:
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [(f"{doc.relative_to(ROOT)}:{line}", command) for doc in docs
            for line, command in shown_commands(doc, entry)]


@functools.lru_cache(maxsize=None)
def parser_for(command: str):
    """The parser that reads ``destila COMMAND …``: the command's own, or the entry point's (built once)."""
    if command in getattr(cli_main, "OWN_PARSERS", ()):
        return import_module(f"destila.cli.{command}").build_parser()
    return cli_main.build_parser()


def parse(argv: list[str]) -> None:
    """Parse ``destila ARGV`` as the entry point does, without running it; SystemExit on a bad command line."""
    if argv and argv[0] in getattr(cli_main, "OWN_PARSERS", ()):
        parser_for(argv[0]).parse_args(argv[1:])
    else:
        parser_for("").parse_args(argv)


COMMANDS = all_commands()
PEER_COMMANDS = all_commands(_PEERS)
SCRIPT_COMMANDS = all_commands(_SCRIPTS)


def test_the_docs_show_commands():
    verbs = {shlex.split(command)[0] for _, command in COMMANDS}
    assert {"cache", "student", "train", "eval", "bench", "demo"} <= verbs


@pytest.mark.parametrize("where, command", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_shown_command_parses(where, command):
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parse(shlex.split(command))
    except SystemExit as exit_:
        pytest.fail(f"{where}: `destila {command}` is refused by the parser (exit {exit_.code}):\n"
                    f"{stderr.getvalue()}")


def test_the_docs_show_the_peer_comparisons():
    assert {shlex.split(command)[0] for _, command in PEER_COMMANDS} == {"loss", "e2e"}


@pytest.mark.parametrize("where, command", PEER_COMMANDS, ids=[where for where, _ in PEER_COMMANDS])
def test_shown_peer_command_parses(where, command):
    from benchmarks.peers.run import build_parser

    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            build_parser().parse_args(shlex.split(command))
    except SystemExit as exit_:
        pytest.fail(f"{where}: `python -m benchmarks.peers {command}` is refused (exit {exit_.code}):\n"
                    f"{stderr.getvalue()}")


def test_a_stale_flag_is_caught():
    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        parse(["cache", "build", "smollm2", "pydoc", "-o", "cache/", "--no-such-flag", "3"])


def test_the_docs_show_the_benchmark_scripts():
    shown = {shlex.split(command)[0] for _, command in SCRIPT_COMMANDS}
    assert {"benchmarks/student_quality.py", "benchmarks/demo_recipe.py", "benchmarks/make_docs.py"} <= shown


@pytest.mark.parametrize("where, command", SCRIPT_COMMANDS, ids=[where for where, _ in SCRIPT_COMMANDS])
def test_shown_benchmark_command_parses(where, command):
    script, *argv = shlex.split(command)
    assert (ROOT / script).is_file(), f"{where}: `python {script}` names a script that does not exist"
    module = import_module(script.removesuffix(".py").replace("/", "."))
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            module.build_parser().parse_args(argv)
    except SystemExit as exit_:
        pytest.fail(f"{where}: `python {command}` is refused by the script's parser (exit {exit_.code}):\n"
                    f"{stderr.getvalue()}")


def test_a_stale_benchmark_flag_is_caught():
    from benchmarks.student_quality import build_parser

    with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
        build_parser().parse_args(["run", "OUT", "--row", "kd", "--no-such-flag"])
