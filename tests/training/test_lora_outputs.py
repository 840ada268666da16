"""A LoRA student's output folder works everywhere: peft's own loader from any folder, `destila eval` and
lm-evaluation-harness's `peft=`, with the merged copy one flag away."""

import os

import pytest
import torch
from transformers import AutoModelForCausalLM

from destila.models import load_causal_lm
from destila.training import DistillationArguments, TrainSpec, train_student

peft = pytest.importorskip("peft", reason="LoRA students need destila[peft]")


@pytest.fixture(scope="module")
def lora_run(tiny_cache, fresh_student, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora-run") / "lora"
    args = DistillationArguments(output_dir=str(out), max_steps=3, per_device_train_batch_size=4, learning_rate=2e-2,
                                 save_strategy="no", report_to="none", eval_fraction=0.1, seed=5, lora_r=4, merge=True)
    result = train_student(TrainSpec(str(fresh_student), out, args, cache=str(tiny_cache)))
    return out, result


def logits(model, vocab: int):
    ids = torch.randint(0, vocab, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_the_adapter_names_a_base_that_loads_from_any_folder(lora_run, fresh_student, tmp_path, monkeypatch):
    import json

    out, result = lora_run
    base = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert os.path.isabs(base) and os.path.samefile(base, fresh_student)
    monkeypatch.chdir(tmp_path)  # elsewhere: a relative base path would not be found from here
    from peft import AutoPeftModelForCausalLM, PeftModel

    auto = AutoPeftModelForCausalLM.from_pretrained(str(out)).eval()
    explicit = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(fresh_student), str(out)).eval()
    vocab = auto.config.vocab_size
    expected = logits(explicit, vocab)
    torch.testing.assert_close(logits(auto, vocab), expected, rtol=0, atol=0)
    # destila's loader (eval, generate, --tasks): the base with the adapter merged, a plain model
    merged_here = load_causal_lm(str(out))
    assert type(merged_here).__module__.startswith("transformers.")
    torch.testing.assert_close(logits(merged_here, vocab), expected, rtol=0, atol=1e-5)
    on_disk = AutoModelForCausalLM.from_pretrained(result["merged"]).eval()  # --merge: one flag away
    torch.testing.assert_close(logits(on_disk, vocab), expected, rtol=0, atol=1e-5)


def test_plain_transformers_loads_the_adapter_folder(lora_run, tmp_path, monkeypatch):
    out, _ = lora_run
    monkeypatch.chdir(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    torch.testing.assert_close(logits(model, model.config.vocab_size),
                               logits(load_causal_lm(str(out)), model.config.vocab_size), rtol=0, atol=1e-5)


def test_destila_eval_reads_the_adapter_folder_as_the_merged_student(lora_run, tiny_cache):
    from destila.eval import EvalSpec, evaluate_models

    out, result = lora_run
    adapter, merged = evaluate_models(EvalSpec([str(out), result["merged"]], cache=str(tiny_cache),
                                               max_tokens=32 * 8, new_tokens=2), isolated=False)
    for key in ("kl_to_teacher", "perplexity", "top1_agreement", "parameters"):
        assert adapter[key] == pytest.approx(merged[key], rel=1e-5), key
    assert adapter["size_bytes"] < merged["size_bytes"]  # the adapter's files, not a copy of the student


def test_an_adapter_whose_base_moved_is_refused_in_one_line(lora_run, tmp_path):
    import json
    import shutil

    moved = shutil.copytree(lora_run[0], tmp_path / "adapter", ignore=shutil.ignore_patterns("merged"))
    config = json.loads((moved / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (moved / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(FileNotFoundError, match="is a LoRA adapter on the base model .*gone.* cannot be loaded"):
        load_causal_lm(str(moved))


@pytest.mark.slow  # the harness twice on a tiny task: about 20 s on 2 busy cores
def test_lm_eval_peft_equals_destila_eval_tasks(lora_run, fresh_student, tmp_path):
    import lm_eval
    from lm_eval.tasks import TaskManager

    from destila.eval.harness import TaskEvalSpec, evaluate_tasks
    from eval.test_harness_tasks import TASK, write_tiny_task

    out, _ = lora_run
    task = write_tiny_task(tmp_path)
    (ours,) = evaluate_tasks([str(out)], TaskEvalSpec(tasks=str(task)), log=lambda _: None)
    direct = lm_eval.simple_evaluate(model="hf", model_args={"pretrained": str(fresh_student), "peft": str(out),
                                                             "device": "cpu"},
                                     tasks=[str(task)], batch_size=4, log_samples=False,
                                     task_manager=TaskManager(include_defaults=False, include_path=str(tmp_path)))
    for metric in ("acc", "acc_norm"):
        assert ours["tasks"][TASK]["metrics"][metric]["value"] == direct["results"][TASK][f"{metric},none"]
