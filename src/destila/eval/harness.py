"""Task accuracy through EleutherAI's lm-evaluation-harness (the optional extra ``destila[eval]``).

Every model runs the same tasks with the same settings (few-shot count,
batch size, limit, seeds, chat template), each loaded the way destila loads
models (folders, ``.gguf`` files, ``smollm2``) and handed to the harness's
own ``HFLM`` wrapper, so the scores and standard errors are the harness's.

Naive equivalent, per model::

    lm_eval.simple_evaluate(model="hf", model_args={"pretrained": MODEL}, tasks=TASKS,
                            num_fewshot=N, batch_size=B, limit=L)["results"]

Tasks (:func:`resolve_tasks`): harness task names (their data come from the
Hugging Face hub), task YAML files and folders in the harness's format (data
on local disk), and destila's built-in ``pydoc_cloze``. Before anything heavy
is loaded, a hub task without a reachable hub is refused in one line.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from destila.eval.task_answers import check_answers
from destila.eval.task_loading import check_choice_lengths, load_local_tasks
from destila.eval.tasks import BUILT_IN_TASKS
from destila.io.user_files import yaml_fault
from destila.models import load_causal_lm, load_tokenizer
from destila.models.hub import hub_offline_reason

INSTALL_HINT = "install the extra with `pip install 'destila[eval]'` (or run `make install`)"
_TASK_SUFFIXES = (".yaml", ".yml")
# The harness's own defaults (lm_eval.simple_evaluate): Python's seed, then numpy's, torch's and few-shot's.
_HARNESS_SEEDS = (0, 1234, 1234, 1234)


@dataclass
class TaskEvalSpec:
    """What ``destila eval --tasks`` runs, the same for every model."""

    tasks: str | None = field(default=None, metadata={
        "metavar": "T1,T2",
        "help": "lm-evaluation-harness tasks, comma-separated: harness task names (data from the hub), task "
                "YAML files or folders (the harness's format, local data), or the built-in pydoc_cloze"})
    num_fewshot: int | None = field(default=None, metadata={
        "help": "few-shot examples per question (default: each task's own, usually 0)"})
    limit: float | None = field(default=None, metadata={
        "help": "at most this many questions per task (below 1: that fraction of them)"})
    seed: int | None = field(default=None, metadata={
        "help": "seed for every random choice of the harness (default: the harness's own seeds); with --draft "
                "and --temperature > 0, the sampling seed (default 0)"})
    apply_chat_template: bool = field(default=False, metadata={
        "help": "with --tasks: render questions with each model's chat template (models that have one)"})

    def __post_init__(self):
        if self.tasks is not None and not [t for t in self.tasks.split(",") if t.strip()]:
            raise ValueError(f"tasks: expected task names or files separated by commas, found {self.tasks!r}")
        if self.num_fewshot is not None and self.num_fewshot < 0:
            raise ValueError(f"num_fewshot: expected 0 or more, found {self.num_fewshot}")
        if self.limit is not None and (self.limit <= 0 or (self.limit >= 1 and self.limit != int(self.limit))):
            raise ValueError(f"limit: expected a whole number of questions or a fraction below 1, found {self.limit}")

    def given_without_tasks(self) -> list[str]:
        """The task flags set although no task is: they would be ignored."""
        if self.tasks is not None:
            return []
        return [f"--{name.replace('_', '-')}" for name in ("num_fewshot", "limit", "seed", "apply_chat_template")
                if getattr(self, name) not in (None, False)]


@dataclass
class TaskSelection:
    """``specs`` as the harness loads them (names and YAML paths), ``include_paths`` to index, ``hub`` names."""

    specs: list[str] = field(default_factory=list)
    include_paths: list[str] = field(default_factory=list)
    hub: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)  # one line per Python file a local task's !function runs


def require_harness() -> None:
    """Refuse in one line when lm-evaluation-harness is not installed (checked without importing it)."""
    if importlib.util.find_spec("lm_eval") is None:
        raise ValueError(f"--tasks: lm-evaluation-harness (lm_eval) is not installed; {INSTALL_HINT}")


def _import_harness():
    """The harness modules (heavy: about 6 s; imported only when tasks are run)."""
    try:
        # optional extra (eval), about 6 s to import: only when tasks are run
        import lm_eval
        from lm_eval.models.huggingface import HFLM
        from lm_eval.tasks import TaskManager
    except ImportError as err:
        raise ValueError(f"--tasks: lm-evaluation-harness could not be imported ({err}); {INSTALL_HINT}") from err
    return lm_eval, HFLM, TaskManager


def resolve_tasks(tasks: str) -> TaskSelection:
    """Sort ``tasks`` (comma-separated) into local YAML files, local folders, built-ins and hub names."""
    selection = TaskSelection()
    for item in (t.strip() for t in tasks.split(",")):
        if not item:
            continue
        path = Path(item).expanduser()
        if item in BUILT_IN_TASKS and not path.exists():
            built = BUILT_IN_TASKS[item]()
            selection.specs.append(str(built))
            selection.include_paths.append(str(built.parent))
        elif path.is_file():
            if path.suffix not in _TASK_SUFFIXES:
                raise ValueError(f"--tasks: {path} is not a task file; expected a harness task .yaml file")
            selection.code += check_task_yaml(path)
            selection.specs.append(str(path.resolve()))
            selection.include_paths.append(str(path.resolve().parent))
        elif path.is_dir():
            for file in sorted(p for suffix in _TASK_SUFFIXES for p in path.rglob(f"*{suffix}")):
                selection.code += check_task_yaml(file)
            selection.specs += _folder_tasks(path)
            selection.include_paths.append(str(path.resolve()))
        elif path.suffix in _TASK_SUFFIXES or os.sep in item:
            raise FileNotFoundError(f"--tasks: no such task file or folder: {path}; check the path")
        else:
            selection.specs.append(item)
            selection.hub.append(item)
    return selection


def check_task_yaml(path: Path) -> list[str]:
    """Refuse a task file that does not parse, in one line with its line and column, before the harness reads it;
    return one line per Python file its ``!function`` tags will run.

    Read as the harness reads it, less the code: its ``!function module.name`` tag is accepted here (the
    harness imports and runs ``module.py`` beside the YAML: a task folder is code), a ``!!python/...``
    tag is refused by the safe loader, as the harness's own loader refuses it.
    """
    # pyyaml: only when a task folder is checked
    import yaml

    runs: dict[Path, str] = {}

    def function(loader, node):
        name = loader.construct_scalar(node)
        module = name.rpartition(".")[0]  # the harness's rule: "a.b.fn" runs a.b.py beside the YAML
        runs.setdefault(path.resolve().parent / f"{module}.py", name)
        return name

    class TaskLoader(yaml.SafeLoader):
        """PyYAML's safe loader with the harness's ``!function`` tag read as its text."""

    TaskLoader.add_constructor("!function", function)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--tasks: {path} is not UTF-8 text; expected a harness task .yaml file") from None
    try:
        yaml.load(text, Loader=TaskLoader)
    except yaml.YAMLError as err:
        raise ValueError(f"--tasks: {path}{yaml_fault(err)}; fix the task file (docs/eval.md shows the format)") \
            from None
    return [f"--tasks: {path} runs Python: the harness imports {file} for its !function {name} (a task folder is "
            "code: run task files you would run as scripts)" for file, name in runs.items()]


def _folder_tasks(folder: Path) -> list[str]:
    """The task and group names defined by the YAML files of ``folder`` (its sub-folders included)."""
    from lm_eval.tasks._index import Kind, TaskIndex  # heavy, optional: the harness

    index = TaskIndex.build([folder.resolve()])
    names = sorted(name for name, entry in index.items() if entry.kind in (Kind.TASK, Kind.PY_TASK, Kind.GROUP))
    if not names:
        raise ValueError(f"--tasks: the folder {folder} holds no harness task (no .yaml file with a `task:` key); "
                         "see docs/eval.md for the format")
    return names


def check_hub_tasks(names: list[str]) -> None:
    """Refuse hub tasks when the hub cannot be reached, naming them and the local way out."""
    offline = hub_offline_reason() if names else None
    if offline is not None:
        listed = ", ".join(repr(n) for n in names)
        raise ValueError(
            f"--tasks: {listed} {'is a harness task' if len(names) == 1 else 'are harness tasks'} whose data come "
            f"from the Hugging Face hub, which cannot be reached ({offline}); run with network access, or give a "
            "local task YAML file or folder instead (the built-in pydoc_cloze works offline; see docs/eval.md)"
        )


_NOISE = ("is not of type `str`", "Custom kwargs can be passed", "already-initialized model")


class _DropNoise(logging.Filter):
    """The harness warns that a loaded model object ignores its loading options: destila loaded it on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(n in message for n in _NOISE)


_DROP_NOISE = _DropNoise()


def _metrics(results: dict) -> dict:
    """``{metric: {"value", "stderr"}}`` from the harness's ``{"acc,none": …, "acc_stderr,none": …}``."""
    metrics = {}
    for key, value in results.items():
        metric, _, where = key.partition(",")
        if not where or metric.endswith("_stderr") or not isinstance(value, (int, float)):
            continue
        stderr = results.get(f"{metric}_stderr,{where}")
        name = metric if where == "none" else f"{metric} ({where})"
        metrics[name] = {"value": float(value), "stderr": float(stderr) if isinstance(stderr, (int, float)) else None}
    return metrics


def prepare_tasks(spec: TaskEvalSpec) -> TaskSelection:
    """Check and resolve ``spec.tasks`` before any model is loaded: the extra, the files, the hub.

    Fails in one line (``ValueError``/``FileNotFoundError``) and within
    seconds: a missing extra, a missing task file, or a hub task without a hub.
    """
    if not spec.tasks:
        raise ValueError("--tasks: expected task names or files, found none")
    require_harness()
    selection = resolve_tasks(spec.tasks)
    check_hub_tasks(selection.hub)
    for line in dict.fromkeys(selection.code):  # said before anything runs, once per file
        logging.getLogger("destila.eval").warning(line)
    return selection


def evaluate_tasks(models: list[str], spec: TaskEvalSpec, *, batch_size: int = 4, device: str = "cpu",
                   selection: TaskSelection | None = None, log=print) -> list[dict]:
    """Run ``spec.tasks`` on each model in turn; per model ``{"model", "tasks", "chat_template_applied", "seconds"}``.

    ``tasks`` maps each task (and group) to ``{"metrics": {name: {"value",
    "stderr"}}, "samples": questions scored}``. Models are loaded one at a
    time and released before the next. ``log`` receives one line per model
    as it starts; the harness shows its own progress bars. ``selection``:
    from :func:`prepare_tasks`, when the caller checked the tasks already.
    """
    selection = selection or prepare_tasks(spec)
    lm_eval, HFLM, TaskManager = _import_harness()
    for name in ("lm_eval.models.huggingface", "lm_eval.api.task", "lm_eval.evaluator"):
        logging.getLogger(name).addFilter(_DROP_NOISE)  # a filter is added once, however often this runs
    manager = TaskManager(include_defaults=bool(selection.hub), include_path=selection.include_paths or None)
    local = load_local_tasks([spec for spec in selection.specs if spec not in selection.hub], manager)
    check_answers(local)
    seeds = _HARNESS_SEEDS if spec.seed is None else (spec.seed,) * 4
    tokenizers = [load_tokenizer(m) for m in models]
    with_template = [bool(getattr(t, "chat_template", None)) for t in tokenizers]
    if spec.apply_chat_template and not any(with_template):
        raise ValueError("--apply-chat-template: none of the models has a chat template (tokenizer.chat_template); "
                         "leave the flag out")
    results = []
    for number, (model, tokenizer, has_template) in enumerate(zip(models, tokenizers, with_template), start=1):
        chat = spec.apply_chat_template and has_template
        log(f"tasks: model {number}/{len(models)}: {model} ({', '.join(selection.specs)}"
            f"{', chat template' if chat else ''})")
        started = time.perf_counter()
        wrapped = HFLM(pretrained=load_causal_lm(model, device=device), tokenizer=tokenizer, batch_size=batch_size)
        try:
            check_choice_lengths(local, wrapped, model)
            out = lm_eval.simple_evaluate(
                model=wrapped, tasks=list(selection.specs), num_fewshot=spec.num_fewshot, batch_size=batch_size,
                limit=spec.limit, task_manager=manager, apply_chat_template=chat, fewshot_as_multiturn=chat,
                log_samples=False, random_seed=seeds[0], numpy_random_seed=seeds[1], torch_random_seed=seeds[2],
                fewshot_random_seed=seeds[3],
            )
        except KeyError as err:
            if "not a registered" not in str(err):
                raise
            raise ValueError(f"--tasks: {err.args[0] if err.args else err}; list the harness's tasks with "
                             "`lm-eval ls tasks`, or give a task YAML file") from err
        finally:
            del wrapped
        samples = out.get("n-samples", {})
        results.append({
            "model": model,
            "tasks": {task: {"metrics": _metrics(values), "samples": samples.get(task, {}).get("effective")}
                      for task, values in out["results"].items()},
            "chat_template_applied": chat,
            "seconds": time.perf_counter() - started,
            "settings": {"num_fewshot": spec.num_fewshot, "limit": spec.limit, "seeds": list(seeds),
                         "batch_size": batch_size, "harness": getattr(lm_eval, "__version__", None)},
        })
    return results
