"""`destila train --config FILE`: the file's options become the parser's defaults, each value checked first.

The file's values are set as defaults, so flags on the command line win.
argparse converts a default only when the command is parsed, and then
reports a bad one as if it were a flag (``argument --learning_rate: invalid
float value: 'fast'``), although no such flag was given. Here each value the
file gives under an option's own name is converted as the flag's text would
be before it becomes a default, and a bad one is refused naming the file, the
line and the key::

    --config run.yaml, line 3: learning_rate: expected a number, found 'fast'

Options that take a JSON object (``lr_scheduler_kwargs``, ...) are checked
the same way, on the command line too. Nothing here imports transformers or
torch: the checks run before them (see :mod:`destila.cli.train_light`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

from destila.io.user_files import config_key_lines, config_values
from destila.training.trl_keys import MAPPED, in_trl_terms, map_trl_keys


@dataclass
class ConfigFile:
    """The command's one flag that is not a field of the run: a file of options."""

    config: str | None = field(default=None, metadata={
        "help": "YAML or JSON file of options (any flag's name without dashes); flags override it", "metavar": "FILE"})


def yaml_scalar(text: str):
    """A flag's text read as YAML reads a config value: ``0.5``, ``true``, ``main``, ``student/``. Text YAML cannot
    read (a ``!!python/...`` tag, an unclosed ``[``) is refused as argparse refuses a value of the wrong type."""
    # pyyaml: only when a flag's value is read this way
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        if "could not determine a constructor" in str(err):
            problem = f"{problem}; Python tags are never run"
        raise argparse.ArgumentTypeError(f"{text!r} is not a plain value ({problem}); give a path, a name, "
                                         "a number or true/false") from None


def flag_names(argv: list[str]) -> list[str]:
    return [arg.partition("=")[0][2:].replace("-", "_") for arg in argv if arg.startswith("--")]


def trl_terms(argv: list[str], config: dict) -> bool:
    """Whether the command line or the config is written in TRL's terms."""
    return in_trl_terms(flag_names(argv)) or in_trl_terms(config)


def given_on_command_line(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The destinations set by ``argv`` itself (not by a default, a config or a run record): ``argv`` parsed again
    with every default a marker."""
    saved = {dest: parser.get_default(dest) for dest in vars(parser.parse_args([]))}
    marker = object()
    parser.set_defaults(**dict.fromkeys(saved, marker))
    try:
        namespace = parser.parse_args(argv)
    finally:
        parser.set_defaults(**saved)
    return {dest for dest, value in vars(namespace).items() if value is not marker}


def read_config(path: str) -> dict:
    """The options in a YAML or JSON file, as a flat ``{name: value}`` mapping."""
    values = config_values(Path(path))
    if not isinstance(values, dict):
        raise ValueError(f"--config {path}: expected a mapping of option names to values, "
                         f"found {type(values).__name__}")
    return values


def apply_config(parser: argparse.ArgumentParser, values: dict, path: str, json_fields=()) -> dict:
    """Make the file's values the parser's defaults, so flags given on the command line override them;
    returns ``{option: the key that set it}``.

    TRL's keys (``model_name_or_path``, ``max_length``, GKD's ``beta``, ...) are mapped onto destila's
    options by :func:`destila.training.trl_keys.map_trl_keys`; every key refused or unknown is named in one line,
    a misspelt one with the nearest name. Then every value given under an option's own name is checked as the
    flag's text would be (``json_fields``: options that take a JSON object), all refusals in one line.
    """
    known = set(vars(parser.parse_args([]))) - {"config"}  # every option's destination, at its default
    normalised, problems = map_trl_keys(values, known)
    if problems:
        raise ValueError(f"--config {path}: {'; '.join(problems)}. Expected names of `destila train --help` "
                         "options (e.g. learning_rate) or TRL config keys such as max_length")
    spelt = {MAPPED[k][0] if k in MAPPED else k: k for k in values}
    names = {str(key).lstrip("-").replace("-", "_"): key for key in values}  # the option's own name, either spelling
    own = {name: key for name, key in names.items() if name in normalised and name not in MAPPED}
    _check_values(parser, {option: (key, normalised[option]) for option, key in own.items()}, path, json_fields)
    parser.set_defaults(**normalised)
    return {option: key for option, key in spelt.items() if option in normalised}  # not a key read as "not set"


def _check_values(parser: argparse.ArgumentParser, values: dict, path: str, json_fields) -> None:
    """``values``: ``{option: (the key the file spells it with, value)}``."""
    lines = config_key_lines(Path(path))
    problems = []
    for option, (key, value) in values.items():
        problem = json_object_problem(value) if option in json_fields else value_problem(parser, option, value)
        if problem:
            problems.append((f"line {lines[str(key)]}: " if str(key) in lines else "") + f"{key}: {problem}")
    if problems:
        first, *rest = problems
        head = f"--config {path}, {first}" if first.startswith("line ") else f"--config {path}: {first}"
        raise ValueError("; ".join([head, *rest]) + "; fix the file (flags on the command line override it)")


def value_problem(parser: argparse.ArgumentParser, option: str, value) -> str | None:
    """What is wrong with ``value`` as ``option``'s (converted as argparse converts the flag's text), or None."""
    # Read only: argparse keeps its option table in this attribute and offers no public view of it.
    actions = list({id(a): a for a in parser._option_string_actions.values() if a.dest == option}.values())
    typed = next((a for a in actions if a.type is not None), None)
    if typed is not None and isinstance(value, str):
        try:
            value = typed.type(value)
        except (TypeError, ValueError, argparse.ArgumentTypeError):
            return f"expected {_expected(typed)}, found {value!r}"
    chosen = next((a for a in actions if a.choices is not None), None)
    if chosen is None or value is None or value == chosen.default:
        return None  # None: "not set", as a written-out config says of an option left at its default
    if value not in chosen.choices and str(value) not in map(str, chosen.choices):
        return f"expected one of {', '.join(map(str, chosen.choices))}, found {value!r}"
    return None


def _expected(action: argparse.Action) -> str:
    if action.choices is not None:
        return "one of " + ", ".join(map(str, action.choices))
    names = {int: "an integer", float: "a number", str: "text"}
    if action.type in names:
        return names[action.type]
    if getattr(action.type, "__name__", "") == "string_to_bool":
        return "true or false"
    return f"a {getattr(action.type, '__name__', 'valid')} value"


def json_object_problem(value) -> str | None:
    """``lr_scheduler_kwargs '{bad'``: text that starts as a JSON object (transformers reads such text with
    ``json.loads``) but is not one; None for a mapping, a file name or a JSON object."""
    if not isinstance(value, str) or not value.startswith("{"):
        return None
    try:
        json.loads(value)
    except ValueError as err:
        return (f"expected a JSON object such as '{{\"num_cycles\": 2}}', found {value!r} (not JSON: "
                f"{getattr(err, 'msg', err)} at column {getattr(err, 'colno', '?')})")
    return None


def check_json_flags(namespace: argparse.Namespace, json_fields, given) -> None:
    """The options of ``json_fields`` given on the command line (``given``: their destinations) that start as a
    JSON object must be one: one line naming the flag otherwise."""
    for option in json_fields:
        problem = option in given and json_object_problem(getattr(namespace, option, None))
        if problem:
            raise ValueError(f"--{option}: {problem}")
