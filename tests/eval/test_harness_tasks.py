"""`destila eval --tasks`: lm-evaluation-harness on tiny random models, checked against the harness itself."""

import json
import subprocess
import sys
import time

import pytest

from conftest import ENV, pydoc_texts
from destila.cli.main import main as cli
from destila.eval.harness import TaskEvalSpec, resolve_tasks
from destila.eval.task_table import markdown_task_table, task_rows

TASK = "tiny_mc"


def write_tiny_task(folder):
    """A local multiple-choice task in the harness's own format: a YAML file and its JSON lines."""
    texts = [" ".join(t.split())[:80] for t in pydoc_texts(12)]
    rows = [{"question": texts[i][:40], "choices": [texts[i][40:], texts[(i + 3) % 12][40:]], "answer": 0}
            for i in range(12)]
    data = folder / "tiny_mc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = folder / "tiny_mc.yaml"
    task.write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {data}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\n"
        "doc_to_choice: '{{choices}}'\ndoc_to_target: '{{answer}}'\n"
        "metric_list:\n  - metric: acc\n  - metric: acc_norm\nmetadata:\n  version: 1.0\n"
    )
    return task


@pytest.mark.slow  # two models through the harness twice: about 20 s on 2 busy cores
def test_accuracy_equals_lm_eval_simple_evaluate(tiny_llama_dir, tiny_gpt2_dir, tmp_path, capsys):
    import lm_eval
    from lm_eval.tasks import TaskManager

    task = write_tiny_task(tmp_path)
    local = TaskManager(include_defaults=False, include_path=str(tmp_path))  # indexing every hub task takes ~20 s
    out = tmp_path / "tasks.json"
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", str(tiny_llama_dir), str(tiny_gpt2_dir), "--tasks", str(task), "--batch-size", "4",
             "--json", str(out)])
    assert exit_info.value.code == 0
    printed = capsys.readouterr().out
    assert f"{TASK}: acc" in printed and " ± " in printed and "(×" in printed
    results = json.loads(out.read_text())
    assert [r["model"] for r in results] == [str(tiny_llama_dir), str(tiny_gpt2_dir)]
    for result in results:
        direct = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": result["model"], "device": "cpu"},
                                         tasks=[str(task)], batch_size=4, log_samples=False, task_manager=local)
        expected = direct["results"][TASK]
        ours = result["tasks"][TASK]
        for metric in ("acc", "acc_norm"):
            assert ours["metrics"][metric]["value"] == expected[f"{metric},none"]
            assert ours["metrics"][metric]["stderr"] == expected[f"{metric}_stderr,none"]
        assert ours["samples"] == 12
    ratio = results[1]["tasks"][TASK]["metrics"]["acc"]["value"] / results[0]["tasks"][TASK]["metrics"]["acc"]["value"]
    rows = dict(task_rows(results))
    assert rows[f"{TASK}: acc"][1].endswith(f"(×{ratio:.2f})")
    assert rows[f"{TASK}: questions"] == ["12", "12"]
    assert markdown_task_table(results).count("\n") == len(rows) + 1


def test_a_folder_of_tasks_and_the_limit(tiny_llama_dir, tmp_path):
    from destila.eval.harness import evaluate_tasks

    write_tiny_task(tmp_path)
    assert resolve_tasks(str(tmp_path)).specs == [TASK]
    (result,) = evaluate_tasks([str(tiny_llama_dir)], TaskEvalSpec(tasks=str(tmp_path), limit=5), log=lambda _: None)
    assert result["tasks"][TASK]["samples"] == 5


def _run(args, timeout=60):
    env = {**ENV, "HF_HUB_OFFLINE": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "destila", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    return done, time.monotonic() - started


def test_a_hub_task_offline_fails_fast_in_one_line():
    done, seconds = _run(["eval", "smollm2", "--tasks", "hellaswag"])
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert "'hellaswag'" in lines[0] and "local task YAML" in lines[0]
    assert seconds < 15  # the model is never loaded and the harness never imported


def test_without_the_extra_tasks_exit_2_saying_what_to_install(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "lm_eval", None)  # as if not installed: find_spec and import both fail
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", "smollm2", "--tasks", str(write_tiny_task(tmp_path))])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install 'destila[eval]'" in err[0]


@pytest.mark.parametrize("args, expected", [
    (["--data", "pydoc", "--limit", "5"], "--limit would be ignored"),
    (["--tasks", "x.yaml", "--teacher", "t"], "--teacher would be ignored"),
    (["--tasks", " , "], "expected task names or files"),
    (["--tasks", "x.yaml", "--limit", "2.5"], "a whole number of questions"),
    (["--tasks", "missing/task.yaml"], "no such task file or folder"),
    ([], "nothing to evaluate"),
])
def test_task_flags_that_cannot_be_honoured_are_refused(args, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli(["eval", "some-model", *args])
    assert exit_info.value.code == 2
    assert expected in capsys.readouterr().err


@pytest.mark.slow  # the harness on two models
def test_the_chat_template_is_applied_to_the_models_that_have_one(tiny_chat_llama_dir, tiny_llama_dir, tmp_path):
    from destila.eval.harness import evaluate_tasks

    spec = TaskEvalSpec(tasks=str(write_tiny_task(tmp_path)), limit=3, apply_chat_template=True)
    results = evaluate_tasks([str(tiny_chat_llama_dir), str(tiny_llama_dir)], spec, log=lambda _: None)
    assert [r["chat_template_applied"] for r in results] == [True, False]
    assert dict(task_rows(results))["chat template"] == ["yes", "no"]
    with pytest.raises(ValueError, match="none of the models has a chat template"):
        evaluate_tasks([str(tiny_llama_dir)], spec, log=lambda _: None)
