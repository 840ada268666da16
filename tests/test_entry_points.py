"""One way in: every public entry point takes one spec dataclass, and few parameters besides it.

Each pipeline step has a spec whose ``__post_init__`` holds its checks; the
command fills it from its flags and the Python function takes the same
object. Counted here: the parameters of each entry point other than its spec
(``*args``/``**kwargs`` count as one each). The tensor-level loss
(``distill_loss``) is not an entry point of this kind: its arguments are
tensors, and its options are the fields of ``LossOptions``.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest

MAX_BESIDES_SPEC = 6

# entry point: (module, name, the parameter holding the spec, the spec class's module and name)
ENTRY_POINTS = {
    "build_cache": ("destila.cache", "build_cache", "spec", "destila.cache.spec", "BuildSpec"),
    "export_cache": ("destila.cache.export", "export_cache", "spec", "destila.cache.export", "ExportSpec"),
    "inspect_cache": ("destila.cache", "inspect_cache", "spec", "destila.cache.read_specs", "InspectSpec"),
    "verify_cache": ("destila.cache", "verify_cache", "spec", "destila.cache.read_specs", "VerifySpec"),
    "train_tokenizer": ("destila.crosstok", "train_tokenizer", "spec", "destila.crosstok.spec", "TokenizerSpec"),
    "train_student": ("destila.training", "train_student", "spec", "destila.training.spec", "TrainSpec"),
    "DistillationTrainer": ("destila.training", "DistillationTrainer", "args", "destila.training.arguments",
                            "DistillationArguments"),
    "init_student": ("destila.student", "init_student", "spec", "destila.student.spec", "StudentInitSpec"),
    "evaluate_model": ("destila.eval", "evaluate_model", "spec", "destila.eval.spec", "EvalSpec"),
    "evaluate_models": ("destila.eval", "evaluate_models", "spec", "destila.eval.spec", "EvalSpec"),
    "evaluate_tasks": ("destila.eval", "evaluate_tasks", "spec", "destila.eval.harness", "TaskEvalSpec"),
    "generate": ("destila.generation", "generate", "spec", "destila.generation.run", "GenerateSpec"),
    "ProgressiveRecipe": ("destila.recipes", "ProgressiveRecipe", "settings", "destila.recipes.common",
                          "RecipeSettings"),
    "SelfRecipe": ("destila.recipes", "SelfRecipe", "settings", "destila.recipes.common", "RecipeSettings"),
    "OnPolicyRecipe": ("destila.recipes", "OnPolicyRecipe", "settings", "destila.recipes.on_policy",
                       "OnPolicySettings"),
    "Demo": ("destila.demo", "Demo", "settings", "destila.demo.settings", "DemoSettings"),
}


# An entry point reads as its stages (setup, loop, save): each stage a named function, the entry point
# itself, docstring included, no longer than a screen.
MAX_ENTRY_POINT_LINES = 60
STAGED = ("destila.training.run:train_student", "destila.eval.run:evaluate_model",
          "destila.cache.stats:inspect_cache", "destila.student.init:init_student")


@pytest.mark.parametrize("path", STAGED)
def test_an_entry_point_reads_as_its_stages(path):
    module, name = path.split(":")
    lines = len(inspect.getsource(getattr(importlib.import_module(module), name)).splitlines())
    assert lines <= MAX_ENTRY_POINT_LINES, (
        f"{path}: {lines} lines; move a stage into a named function of its module (at most "
        f"{MAX_ENTRY_POINT_LINES})")


def test_inspect_and_verify_take_their_spec_or_a_path(tmp_path):
    from destila.cache import InspectSpec, VerifySpec
    from destila.cache.read_specs import InspectSpec as Declared

    assert InspectSpec is Declared and InspectSpec.of(tmp_path) == InspectSpec(tmp_path)
    assert InspectSpec.of(tmp_path, max_sequences=2, coverage=None) == InspectSpec(tmp_path, max_sequences=2)
    assert VerifySpec.of(tmp_path) == VerifySpec.of(VerifySpec(tmp_path)) == VerifySpec(tmp_path)
    with pytest.raises(ValueError, match=r"coverage: expected a fraction of the teacher's mass in \(0, 1\]"):
        InspectSpec(tmp_path, coverage=1.5)
    with pytest.raises(ValueError, match="max_sequences: expected an integer ≥ 1, found 0"):
        InspectSpec(tmp_path, max_sequences=0)
    with pytest.raises(ValueError, match="pass either an InspectSpec or"):
        InspectSpec.of(InspectSpec(tmp_path), max_sequences=3)


@pytest.mark.parametrize("name", sorted(ENTRY_POINTS))
def test_every_entry_point_takes_its_spec_and_at_most_six_parameters_besides(name):
    module, attr, holder, spec_module, spec_name = ENTRY_POINTS[name]
    function = getattr(importlib.import_module(module), attr)
    spec = getattr(importlib.import_module(spec_module), spec_name)
    assert dataclasses.is_dataclass(spec) and hasattr(spec, "__post_init__"), f"{spec_name}: no checks"
    parameters = {p.name: p for p in inspect.signature(function).parameters.values() if p.name != "self"}
    assert holder in parameters, f"{name}{inspect.signature(function)} takes no {spec_name}"
    # The trainer takes (model, args) positionally, as transformers' Trainer does: *args holds the spec.
    annotation = str(parameters[holder].annotation)
    assert spec_name in annotation or parameters[holder].kind is inspect.Parameter.VAR_POSITIONAL, annotation
    besides = len(parameters) - 1
    assert besides <= MAX_BESIDES_SPEC, f"{name}{inspect.signature(function)}: {besides} parameters besides its spec"


def test_the_spec_is_what_the_command_line_fills(tmp_path):
    """The flat keyword forms build the very spec the command builds (one set of checks)."""
    from destila.student.spec import StudentInitSpec
    from destila.training import DistillationArguments
    from destila.training.run import _spec_of
    from destila.training.spec import TrainSpec

    args = DistillationArguments(output_dir=str(tmp_path / "o"), report_to="none")
    flat = _spec_of("s", tmp_path / "o", args, {"teacher": "t", "data": ["a document"], "seq_len": 16})
    assert flat == TrainSpec("s", tmp_path / "o", args, teacher="t", data=flat.data)
    assert flat.data.documents == ("a document",) and flat.data.seq_len == 16
    with pytest.raises(ValueError, match="give either a cache .offline., or a teacher and data"):
        TrainSpec("s", tmp_path / "o", args)
    with pytest.raises(ValueError, match="args.output_dir is .* but out is"):
        TrainSpec("s", tmp_path / "elsewhere", args, cache="c")
    with pytest.raises(ValueError, match="teacher_placement is about the online teacher"):
        TrainSpec("s", tmp_path / "o", args, cache="c", teacher_placement={"device_map": "auto"})
    with pytest.raises(ValueError, match="--select importance: measuring the layers needs calibration text"):
        StudentInitSpec("t", tmp_path / "s", layers=2, select="importance")


def test_the_eval_spec_keeps_one_data_spec_with_its_token_cap():
    from destila.data import DataSpec
    from destila.eval import EvalSpec

    spec = EvalSpec(["m"], data="pydoc", max_tokens=4096)
    assert spec.data == DataSpec("pydoc", max_tokens=4096)
    shipped = EvalSpec(**dataclasses.asdict(EvalSpec(["m"], data=DataSpec(["x y z"], seq_len=8), max_tokens=64)))
    assert shipped.data == DataSpec(("x y z",), seq_len=8, max_tokens=64)  # what a worker process rebuilds
    with pytest.raises(ValueError, match="give either a cache or data"):
        EvalSpec(["m"], cache="c", data="pydoc")
    with pytest.raises(ValueError, match="--eval-fraction: only meaningful with --cache"):
        EvalSpec(["m"], data="pydoc", eval_fraction=0.1)


def test_the_demo_and_the_recipes_declare_their_shared_sizes_once():
    """seq_len, top_k, batch size, learning rate, ...: one declaration (StageSettings), never redeclared."""
    from destila.demo.settings import CachedStageSettings, DemoSettings, StageSettings
    from destila.recipes import OnPolicySettings, RecipeSettings

    for cls, base in ((DemoSettings, CachedStageSettings), (RecipeSettings, CachedStageSettings),
                      (OnPolicySettings, StageSettings)):
        assert issubclass(cls, base)
        shared = {f.name for f in dataclasses.fields(base)}
        redeclared = shared & set(vars(cls).get("__annotations__", {}))
        assert not redeclared, f"{cls.__name__} declares {redeclared} again"
        defaults = {f.name: f.default for f in dataclasses.fields(cls) if f.name in shared}
        assert defaults == {f.name: f.default for f in dataclasses.fields(base)}
    with pytest.raises(ValueError, match="holdout_every: expected an integer ≥ 2"):
        RecipeSettings(holdout_every=1)
