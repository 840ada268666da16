"""`destila train`'s parser without importing transformers or torch: ``--help`` and every mistake answered at once.

The live parser (:func:`destila.cli.train.build_parser`) is
``HfArgumentParser`` over ``DistillationArguments``, a ``TrainingArguments``
subclass, and importing transformers takes seconds. The same parser is built
here from two light sources:

- ``TrainingArguments``' fields, read from the installed transformers' source
  (:mod:`destila.training.trainer_source`), and ``HfArgumentParser``'s own
  module, loaded from the installed file: whatever the transformers 5.x;
- destila's own flags (the loss and run options of ``DistillationArguments``,
  the targets, the online data, the teacher's placement, TRL's names),
  written from their declarations into ``train_flags.json`` beside this
  module. They change with destila alone; a test compares the parser built
  here with the live one (help text, flags, defaults, types), and after a
  change to destila's flags they are written again with
  ``python -m destila.cli.train_light``.

:func:`answer_early` runs before the command imports anything heavy: it
prints the help (with ``--config``: the file's values as the defaults shown),
or refuses a mistake in one line: an unknown or misspelt flag, a value of the
wrong type or out of its choices (on the command line or in the config file,
named by file and line), text that is not the JSON object an option takes, a
value out of its range (:mod:`destila.training.argument_ranges`), a
``--cache`` that does not exist. What it accepts goes on to the live parse,
which checks the rest.

Naive equivalent::

    build_parser().parse_args(argv)  # imports transformers and torch first
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import json
import sys
from pathlib import Path

from destila.cli.parser import Parser
from destila.cli.train_config import apply_config, check_json_flags, given_on_command_line, read_config, trl_terms
from destila.cli.train_config import flag_names, yaml_scalar
from destila.training.trainer_source import SourceUnreadable, annotation, hf_argparser, training_arguments_fields

STORED = Path(__file__).with_name("train_flags.json")
# The type functions destila's own flags use, by name (the stored flags name them).
_TYPES = {"int": int, "float": float, "str": str, f"{yaml_scalar.__module__}.{yaml_scalar.__qualname__}": yaml_scalar}
_KINDS = {"_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false"}
# argparse's default groups: their arguments go to the parser itself.
_DEFAULT_GROUPS = ("positional arguments", "options")


@functools.lru_cache(maxsize=1)
def _record() -> dict:
    return json.loads(STORED.read_text(encoding="utf-8"))


def light_parser() -> argparse.ArgumentParser:
    """``destila train``'s parser, as :func:`destila.cli.train.build_parser` builds it, without transformers
    (:class:`SourceUnreadable` when the installed transformers' source is not what this reads)."""
    record = _record()
    hf = hf_argparser()

    class TrainParser(Parser, hf.HfArgumentParser):
        """transformers' flags for the dataclasses, with destila's two spellings and "did you mean"."""

    parser = TrainParser([_distillation_arguments(record["distillation_fields"])], **record["parser"])
    groups = {}
    for group in record["groups"]:
        groups[group["title"]] = (parser if group["title"] in _DEFAULT_GROUPS
                                  else parser.add_argument_group(group["title"], group["description"]))
    trl = set()
    for action in record["actions"]:
        if action["trl"]:
            if action["dest"] in vars(parser.parse_args([])):
                continue  # an option of the same name is declared already (TrainingArguments' or destila's)
            trl.add(action["dest"])
        _add(groups[action["group"]], action)
    parser.trl_flags = trl  # read back by apply_trl_flags
    return parser


def _distillation_arguments(declared: list[dict]) -> type:
    """A dataclass with ``DistillationArguments``' fields: ``TrainingArguments``' (from its source, in its order,
    those destila redeclares with destila's type, default and added metadata), then destila's own."""
    own = {d["name"]: d for d in declared}
    specs = []
    for name, hint, source in training_arguments_fields()[0]:
        if not source.init:
            continue
        if name in own:
            mine = own.pop(name)
            hint, source = annotation(mine["annotation"]), dataclasses.field(
                default=ast.literal_eval(mine["default"]), metadata={**source.metadata, **mine["metadata"]})
        else:
            source = dataclasses.field(default=source.default, default_factory=source.default_factory,
                                       metadata=source.metadata)
        specs.append((name, hint, source))
    for name, mine in own.items():
        specs.append((name, annotation(mine["annotation"]), dataclasses.field(
            default=ast.literal_eval(mine["default"]), metadata=mine["metadata"])))
    return dataclasses.make_dataclass("DistillationArguments", specs)


def _add(container, action: dict) -> None:
    hidden = action["help"] == argparse.SUPPRESS  # argparse tests its marker by identity, which JSON does not keep
    kwargs = {"help": argparse.SUPPRESS if hidden else action["help"], "default": ast.literal_eval(action["default"])}
    if action["kind"] == "store":
        kwargs.update(type=_TYPES[action["type"]] if action["type"] else None, choices=action["choices"],
                      metavar=action["metavar"], nargs=action["nargs"])
        if action["nargs"] in ("?", "*") or action["const"] != "None":
            kwargs["const"] = ast.literal_eval(action["const"])
    if action["option_strings"]:
        container.add_argument(*action["option_strings"], dest=action["dest"], action=action["kind"],
                               required=action["required"], **kwargs)
    else:
        container.add_argument(action["dest"], action=action["kind"], **kwargs)


def answer_early(argv: list[str]) -> int | None:
    """``destila train ARGV`` answered before transformers is imported: 0 after printing the help; a mistake
    raises ``ValueError`` (one line) or exits through argparse (usage and one line); None: the live parse goes on.
    The live parse also answers when the installed transformers' source cannot be read here (slower, the same
    answers)."""
    try:
        parser = light_parser()
    except SourceUnreadable:
        return None
    ours = argv[:argv.index("--")] if "--" in argv else argv
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    pre.add_argument("--resume", nargs="?", const=True)
    known, _ = pre.parse_known_args(ours)
    asks_help = any(arg in ("-h", "--help") for arg in ours)
    if asks_help and known.resume:
        return None  # the resumed run's record sets the defaults shown: read by the live parse
    config = read_config(known.config) if known.config else {}
    in_trl_terms = trl_terms(argv, config)
    if in_trl_terms:
        from destila.training.trl_defaults import gkd_defaults

        parser.set_defaults(**gkd_defaults([*flag_names(argv), *config]))
    json_fields = training_arguments_fields()[1]
    if known.config:
        apply_config(parser, config, known.config, json_fields)
    namespace = parser.parse_args(argv)  # --help prints and exits here
    check_json_flags(namespace, json_fields, given_on_command_line(parser, argv))
    if known.resume:
        return None  # a resumed run's recorded options are the defaults: checked by the live parse
    from destila.training.argument_ranges import check_argument_ranges, check_finite_arguments

    check_finite_arguments(namespace)
    check_argument_ranges(namespace)
    if namespace.cache is not None:
        from destila.hub_ids import missing_cache_problem

        if problem := missing_cache_problem(namespace.cache):
            raise FileNotFoundError(problem)
    if not in_trl_terms:  # TRL's model_name_or_path and output_dir are mapped by the live parse
        if namespace.student is None:
            parser.error("the following arguments are required: student")
        if namespace.output_dir is None:
            parser.error("the following arguments are required: -o/--out (or --output_dir)")
    return None


def write_record() -> dict:
    """destila's own flags as the live parser declares them (imports transformers: run when they change)."""
    from destila.cli.fields import add_fields
    from destila.cli.train import build_parser
    from destila.cli.train_trl import trl_flags_class
    from destila.training import DistillationArguments

    live = build_parser()
    own = DistillationArguments.__dict__["__annotations__"]
    inherited = {f.name: f for f in dataclasses.fields(DistillationArguments.__mro__[1])}
    declared = []
    for f in dataclasses.fields(DistillationArguments):
        if f.name not in own or not f.init:
            continue
        assert f.default_factory is dataclasses.MISSING, f.name
        metadata = dict(f.metadata)
        if f.name in inherited:  # only what destila adds to transformers' declaration
            metadata = {k: v for k, v in metadata.items() if inherited[f.name].metadata.get(k, object()) != v}
        declared.append({"name": f.name, "annotation": own[f.name], "default": _literal(f.default),
                         "metadata": metadata})
    hf_dests = {f.name for f in dataclasses.fields(DistillationArguments) if f.init}
    trl_group = Parser().add_argument_group("TRL")
    add_fields(trl_group, trl_flags_class(set()))  # every TRL key: those taken are left out when built
    groups, actions = [], []
    for group in live._action_groups:  # argparse has no public view of its groups
        groups.append({"title": group.title, "description": group.description})
        for action in group._group_actions:
            if action.dest in hf_dests or isinstance(action, argparse._HelpAction):
                continue
            if action.dest in live.trl_flags:
                continue
            actions.append(_action(action, group.title, trl=False))
        if any(a.dest in live.trl_flags for a in group._group_actions):
            actions.extend(_action(a, group.title, trl=True) for a in trl_group._group_actions)
    record = {"parser": {"prog": live.prog, "usage": live.usage, "description": live.description},
              "distillation_fields": declared, "groups": groups, "actions": actions}
    json.dumps(record)  # every value is JSON
    return record


def _action(action: argparse.Action, group: str, trl: bool) -> dict:
    kind = type(action).__name__
    assert kind in _KINDS, f"{action.dest}: {kind} is not declared by add_fields"
    type_name = None
    if action.type is not None:
        type_name = action.type.__name__ if action.type in (int, float, str) else \
            f"{action.type.__module__}.{action.type.__qualname__}"
        assert type_name in _TYPES, f"{action.dest}: add {type_name} to _TYPES"
    return {"group": group, "trl": trl, "option_strings": action.option_strings, "dest": action.dest,
            "kind": _KINDS[kind], "type": type_name, "default": _literal(action.default),
            "const": _literal(action.const), "required": action.required,
            "choices": list(action.choices) if action.choices is not None else None, "metavar": action.metavar,
            "help": action.help, "nargs": action.nargs}


def _literal(value) -> str:
    text = repr(value)
    assert ast.literal_eval(text) == value, f"{value!r} is not a literal"
    return text


if __name__ == "__main__":
    from destila.io import write_atomic

    write_atomic(STORED, json.dumps(write_record(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {STORED}", file=sys.stderr)
