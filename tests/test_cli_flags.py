"""Flags are declared once (dataclass fields) and read the same way on every command: either spelling, and
"did you mean" with the command's own usage for a misspelt one."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path

import pytest

from destila.bench.e2e import E2EConfig, LongContextConfig
from destila.bench.loss import LossBenchConfig
from destila.cache.spec import BuildSpec
from destila.cli import train as train_cli
from destila.cli.main import OWN_PARSERS, build_parser, main
from destila.eval.spec import EvalSpec
from destila.models.placement import PlacementSpec
from destila.student.spec import StudentInitSpec

SRC = Path(__file__).resolve().parents[1] / "src" / "destila"


def _leaves(parser: argparse.ArgumentParser, path=()):
    """``(command words, parser)`` for every command that takes flags (no further sub-commands)."""
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield path, parser
        return
    for name, sub in subcommands[0].choices.items():
        yield from _leaves(sub, (*path, name))


# A command that parses its own flags is listed by the entry point's parser only for --help.
LEAVES = [*((words, p) for words, p in _leaves(build_parser()) if words[0] not in OWN_PARSERS),
          (("train",), train_cli.build_parser())]


def _long_flags(parser) -> list[str]:
    return [name for action in parser._actions for name in action.option_strings if name.startswith("--")]


@pytest.mark.parametrize("words, parser", LEAVES, ids=[" ".join(words) for words, _ in LEAVES])
def test_every_flag_of_every_command_takes_both_spellings(words, parser):
    flags = _long_flags(parser)
    assert flags, words
    for flag in flags:
        for spelling in (flag.replace("_", "-"), "--" + flag[2:].replace("-", "_")):
            assert parser._respelled([spelling, "x"])[0] in flags, (words, flag, spelling)


def test_eval_takes_the_underscore_spelling():
    args = build_parser().parse_args(["eval", "model", "--cache", "c", "--eval_fraction", "0.1", "--max_tokens=64"])
    assert args.eval_fraction == 0.1 and args.max_tokens == 64


def test_train_and_cache_build_take_both_spellings():
    train = train_cli.parse(["s", "--cache", "c", "-o", "out", "--eval-fraction", "0.2", "--learning-rate", "1e-3"])[1]
    assert train.eval_fraction == 0.2 and train.learning_rate == 1e-3
    build = build_parser().parse_args(["cache", "build", "t", "pydoc", "-o", "c", "--seq_len", "64",
                                       "--device_map", "auto", "--head_chunk_rows", "7"])
    assert (build.seq_len, build.device_map, build.head_chunk_rows) == (64, "auto", 7)


def test_a_value_that_looks_like_a_flag_of_another_spelling_is_kept():
    """Only flags are respelled, and only into flags the command has: ``--`` ends the flags."""
    parser = build_parser()
    leaf = dict(LEAVES)[("eval",)]
    assert leaf._respelled(["--no_such_flag", "--", "--eval_fraction"]) == ["--no_such_flag", "--", "--eval_fraction"]
    assert parser.parse_args(["eval", "m", "--cache", "c", "--prompt=--eval_fraction"]).prompt == "--eval_fraction"


@pytest.mark.parametrize("argv, command, suggestion", [
    (["train", "s", "--cache", "c", "-o", "o", "--learnig_rate", "1e-3"], "train", "--learning_rate"),
    (["cache", "build", "t", "pydoc", "-o", "c", "--seq-lne", "64"], "cache build", "--seq-len"),
    (["eval", "m", "--cache", "c", "--eval_fractoin", "0.1"], "eval", "--eval_fraction"),
    (["eval", "m", "--cache", "c", "--eval-fractoin", "0.1"], "eval", "--eval-fraction"),
    (["bench", "e2e", "--long-contxt"], "bench e2e", "--long-context"),
    (["student", "init", "t", "-o", "s", "--calibraton_tokens", "64"], "student init", "--calibration_tokens"),
])
def test_a_misspelt_flag_gets_did_you_mean_and_the_commands_usage(argv, command, suggestion, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    err = capsys.readouterr().err
    assert done.value.code == 2
    assert err.startswith(f"usage: destila {command} "), err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"destila {command}: error: unrecognized arguments: ") and line.endswith(
        f"; did you mean {suggestion}?"), line


def test_a_flag_with_nothing_near_says_so(capsys):
    with pytest.raises(SystemExit) as done:
        main(["cache", "inspect", "c", "--zzzzzz"])
    assert done.value.code == 2
    assert "--zzzzzz is not an option of this command" in capsys.readouterr().err


def _action(parser, dest):
    return next(a for a in parser._actions if a.dest == dest)


def test_teacher_placement_is_declared_once_for_cache_build_and_train():
    build = dict(LEAVES)[("cache", "build")]
    train = train_cli.build_parser()
    assert issubclass(BuildSpec, PlacementSpec)
    for f in dataclasses.fields(PlacementSpec):
        cached = _action(build, f.name)
        assert cached.default == f.default and cached.choices == f.metadata.get("choices")
        assert f.metadata["help"] in cached.help
        if f.name == "device":  # the online teacher runs where the student trains
            assert not any(a.dest == "teacher_device" for a in train._actions)
            continue
        online = _action(train, "teacher_" + f.name)
        assert "--teacher-" + f.name.replace("_", "-") in online.option_strings
        assert online.default == f.default and online.choices == f.metadata.get("choices")
        assert f.metadata["help"] in online.help


def test_teacher_placement_without_a_teacher_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"--teacher-device-map: where the online teacher goes \(with --teacher\)"):
        train_cli.run(["s", "--cache", str(tmp_path), "-o", str(tmp_path / "o"), "--teacher_device_map", "auto"])


@pytest.mark.parametrize("cls, words, skip", [
    (LossBenchConfig, ("bench", "loss"), {"extra"}),
    (E2EConfig, ("bench", "e2e"), set()),
])
def test_every_bench_config_field_is_a_flag_with_its_default(cls, words, skip):
    parser = dict(LEAVES)[words]
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        action = _action(parser, f.name)
        assert "--" + f.name.replace("_", "-") in action.option_strings
        assert action.default == f.default and f.metadata["help"] in action.help


def test_bench_flags_read_into_the_configs():
    args = build_parser().parse_args(["bench", "e2e", "--lr", "0.01", "--methods", "online,fused", "--long-context",
                                      "--seq-lens", "1K,2K", "--memory_budget", "0.5"])
    cfg = E2EConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(E2EConfig)})
    assert cfg.learning_rate == 0.01 and cfg.methods == ("online", "fused") and args.long_context
    assert (args.seq_lens, args.memory_budget) == ((1024, 2048), 2**29)
    assert {f.name for f in dataclasses.fields(LongContextConfig)} >= {"seq_lens", "memory_budget"}


def test_no_command_edits_the_parsers_internals():
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if re.search(r"\._actions\b", p.read_text())]
    assert offenders == []


@pytest.mark.parametrize("spelling", ["-", "_"])
def test_eval_and_student_init_take_both_spellings_of_a_multi_word_flag(spelling):
    def flag(name):
        return "--" + name.replace("_", spelling)

    parser = build_parser()
    evaluate = parser.parse_args(["eval", "a", "b", "--cache", "c", flag("eval_fraction"), "0.1",
                                  flag("max_tokens"), "64", flag("batch_size"), "2", flag("new_tokens"), "8"])
    assert evaluate.models == ["a", "b"]
    assert (evaluate.eval_fraction, evaluate.max_tokens, evaluate.batch_size, evaluate.new_tokens) == (0.1, 64, 2, 8)
    init = parser.parse_args(["student", "init", "t", "-o", "s", "--layers", "0-1,3", flag("num_key_value_heads"), "2",
                              "--data", "pydoc", flag("calibration_tokens"), "64", flag("text_field"), "body"])
    assert (init.layers, init.num_key_value_heads, init.calibration_tokens, init.text_field) == ([0, 1, 3], 2, 64,
                                                                                                 "body")


@pytest.mark.parametrize("cls, words, positional", [
    (EvalSpec, ("eval",), {"models": "MODEL"}),
    (StudentInitSpec, ("student", "init"), {"teacher": "teacher"}),
])
def test_the_help_of_eval_and_student_init_lists_every_field_as_a_flag(cls, words, positional):
    parser = dict(LEAVES)[words]
    shown = " ".join(parser.format_help().split())
    for f in dataclasses.fields(cls):
        if f.metadata.get("flag", True) is False:  # a Python-only field (e.g. calibration token ids)
            assert not any(a.dest == f.name for a in parser._actions), (words, f.name)
            continue
        action = _action(parser, f.name)
        if f.name in positional:
            assert action.option_strings == [] and positional[f.name] in shown
        else:
            dashed = "--" + f.name.replace("_", "-")
            assert dashed in action.option_strings and dashed in shown, (words, f.name)
            required = f.default is dataclasses.MISSING
            assert action.required == required and (required or action.default == f.default), (words, f.name)
        assert " ".join(f.metadata["help"].split()) in shown, (words, f.name)


@pytest.mark.parametrize("argv", [
    ["eval", "m", "--cache", "c", "--data", "pydoc"],
    ["student", "init", "t", "-o", "s", "--cache", "c", "--data", "pydoc"],
    ["student", "init", "t", "-o", "s", "--layers", "2", "--config", "num_hidden_layers=1"],
    ["student", "init", "t", "-o", "s", "--layers", "a-b"],
])
def test_eval_and_student_init_refuse_flags_that_exclude_each_other_and_a_bad_layer_list(argv, capsys):
    with pytest.raises(SystemExit) as done:
        main(argv)
    assert done.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"destila {' '.join(argv[:2] if argv[0] == 'student' else argv[:1])}: error: argument ")
    assert "not allowed with argument" in line or line.endswith(
        "argument --layers: expected teacher layer indices like 0-7,27-29, found 'a-b'"), line


def test_student_init_hands_one_spec_to_init_student(monkeypatch, tmp_path):
    """The command fills a StudentInitSpec from its flags and passes that very object; its checks run there."""
    import destila.student.init as init

    given = []
    monkeypatch.setattr(init, "init_student", lambda spec, progress=False: given.append(spec) or {})
    with pytest.raises(KeyError):  # the summary printed afterwards: the stub's {} has none
        main(["student", "init", "t", "-o", str(tmp_path / "s"), "--config", "num_hidden_layers=1", "--seed", "3"])
    (spec,) = given
    assert isinstance(spec, StudentInitSpec) and spec.config == {"num_hidden_layers": 1} and spec.seed == 3
    with pytest.raises(ValueError, match=r"--seed: seeds a fresh model's initialisation"):
        StudentInitSpec("t", tmp_path / "s", layers=2, seed=3)


def test_flags_are_declared_only_through_dataclass_fields():
    """Besides `destila`'s own --version and --debug, every argument comes from ``add_fields``."""
    declared = {str(p.relative_to(SRC)): len(re.findall(r"\.add_argument\(", p.read_text())) for p in SRC.rglob("*.py")}
    assert {path for path, count in declared.items() if count} == {"cli/fields.py", "cli/main.py"}
    assert declared["cli/main.py"] == 2
