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

from destila.cli.fields import _scalar_type, _selected, add_fields
from destila.cli.parser import Parser
from destila.cli.train_config import ConfigFile, apply_config, check_json_flags, flag_names, given_on_command_line
from destila.cli.train_config import read_config, trl_terms, yaml_scalar
from destila.hub_ids import missing_cache_problem
from destila.training.argument_ranges import check_argument_ranges, check_finite_arguments
from destila.training.trainer_source import SourceUnreadable, annotation, hf_argparser, training_arguments_fields
from destila.training.trl_defaults import trl_defaults

STORED = Path(__file__).with_name("train_flags.json")
# The type functions destila's own flags use, by name (the stored flags name them).
_TYPES = {f"{t.__module__}.{t.__qualname__}": t for t in (int, float, str, yaml_scalar)}
# The flag's type, as add_fields reads it from a field's annotation.
_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}


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

    try:
        parser = TrainParser([_distillation_arguments(record["distillation_fields"])], **record["parser"])
    except (TypeError, ValueError, RuntimeError) as err:  # HfArgumentParser's refusal of a type read here
        raise SourceUnreadable(f"TrainingArguments as read from the source: {err}") from None
    for group in record["field_groups"]:
        container = parser if group["title"] is None else parser.add_argument_group(group["title"])
        fields = group["fields"]
        if group["trl"]:  # less the names declared already, as add_trl_flags leaves them out
            taken = set(vars(parser.parse_args([])))
            fields = [f for f in fields if f["name"] not in taken]
            parser.trl_flags = {f["name"] for f in fields}  # read back by apply_trl_flags
        add_fields(container, _dataclass(fields), positional=group["positional"], prefix=group["prefix"])
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


def _dataclass(declared: list[dict]) -> type:
    """The stored fields as a dataclass for :func:`~destila.cli.fields.add_fields`: each with the flag's scalar
    type, its default (none where the field has none) and its metadata (a type function by name)."""
    specs = []
    for spec in declared:
        metadata = dict(spec["metadata"])
        if "type" in metadata:
            metadata["type"] = _TYPES[metadata["type"]]
        if metadata.get("help") == argparse.SUPPRESS:  # argparse tests its marker by identity, which JSON loses
            metadata["help"] = argparse.SUPPRESS
        default = {"default": ast.literal_eval(spec["default"])} if spec["default"] is not None else {}
        specs.append((spec["name"], _SCALARS[spec["type"]], dataclasses.field(metadata=metadata, **default)))
    return dataclasses.make_dataclass("Flags", specs, kw_only=True)


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
    # A first look at the flags that decide the defaults (the config file, a resumed run's record), from the same
    # fields, as the live parse takes it.
    pre = argparse.ArgumentParser(add_help=False)
    add_fields(pre, ConfigFile)
    add_fields(pre, _dataclass([f for group in _record()["field_groups"] for f in group["fields"]
                                if f["name"] == "resume"]))
    known, _ = pre.parse_known_args(ours)
    asks_help = any(arg in ("-h", "--help") for arg in ours)
    if asks_help and known.resume:
        return None  # the resumed run's record sets the defaults shown: read by the live parse
    config = read_config(known.config) if known.config else {}
    in_trl_terms = trl_terms(argv, config)
    if in_trl_terms:
        parser.set_defaults(**trl_defaults([*flag_names(argv), *config]))
    json_fields = training_arguments_fields()[1]
    if known.config:
        apply_config(parser, config, known.config, json_fields)
    namespace = parser.parse_args(argv)  # --help prints and exits here
    check_json_flags(namespace, json_fields, given_on_command_line(parser, argv))
    if known.resume:
        return None  # a resumed run's recorded options are the defaults: checked by the live parse
    check_finite_arguments(namespace)
    check_argument_ranges(namespace)
    if namespace.cache is not None and (problem := missing_cache_problem(namespace.cache)):
        raise FileNotFoundError(problem)
    if not in_trl_terms:  # TRL's model_name_or_path and output_dir are mapped by the live parse
        if namespace.student is None:
            parser.error("the following arguments are required: student")
        if namespace.output_dir is None:
            parser.error("the following arguments are required: -o/--out (or --output_dir)")
    return None


def write_record() -> dict:
    """destila's own flags as declared (imports transformers: run when they change)."""
    # destila's declarations import transformers and torch: only to write the flags again
    from destila.cli.train import DESCRIPTION, USAGE, field_sources
    from destila.cli.train_trl import trl_flags_class
    from destila.training import DistillationArguments

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
    groups = []
    for title, cls, how in field_sources():
        groups.append({"title": title, "trl": False, "positional": list(how.get("positional", ())),
                       "prefix": how.get("prefix", ""), "fields": [_field(cls, f) for f in _selected(
                           cls, how.get("exclude", ()), how.get("only"))]})
    trl = trl_flags_class(set())  # every TRL key: those taken are left out when the parser is built
    groups.append({"title": "TRL's names (mapped onto the options above, with TRL's defaults)", "trl": True,
                   "positional": [], "prefix": "", "fields": [_field(trl, f) for f in dataclasses.fields(trl)]})
    record = {"parser": {"prog": "destila train", "usage": USAGE, "description": DESCRIPTION},
              "distillation_fields": declared, "field_groups": groups}
    json.dumps(record)  # every value is JSON
    return json.loads(json.dumps(record))


def _field(cls, f: dataclasses.Field) -> dict:
    metadata = dict(f.metadata)
    if "type" in metadata:
        function = metadata["type"]
        metadata["type"] = f"{function.__module__}.{function.__qualname__}"
        assert metadata["type"] in _TYPES, f"{f.name}: add {metadata['type']} to _TYPES"
    for key in ("choices", "aliases"):
        if key in metadata:
            metadata[key] = list(metadata[key])
    has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    default = f.default if f.default is not dataclasses.MISSING else None
    return {"name": f.name, "type": _scalar_type(cls, f.name).__name__, "metadata": metadata,
            "default": _literal(default) if has_default else None}


def _literal(value) -> str:
    text = repr(value)
    assert ast.literal_eval(text) == value, f"{value!r} is not a literal"
    return text


if __name__ == "__main__":
    from destila.io import write_atomic

    write_atomic(STORED, json.dumps(write_record(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {STORED}", file=sys.stderr)
