"""Nothing non-finite is saved as a success: NaN/inf options refused up front, a NaN model refused by every command
that loads it, and a run that diverges stops with one line naming the step, saving nothing over what it had."""

from __future__ import annotations

import json
import re
import shutil

import pytest
import torch
from fault_helpers import (  # noqa: F401 (fixtures)
    TRAIN_ARGS, destila_in_process, error_line, small_cache, snapshot, student, train_command,
)
from safetensors.torch import load_file, save_file

from destila.eval.run import evaluate_model
from destila.eval.spec import EvalSpec
from destila.models.finite import all_finite, nonfinite_tensors
from destila.training.finite import FiniteGradients, NonFiniteTraining


@pytest.mark.parametrize("flag, value", [("--learning_rate", "inf"), ("--weight_decay", "nan"),
                                         ("--max_grad_norm", "nan"), ("--temperature", "inf"),
                                         ("--adam_beta1", "-inf")])
def test_a_non_finite_option_is_refused_before_anything_is_loaded(student, small_cache, tmp_path, flag, value):
    result = destila_in_process(*train_command(student, small_cache, tmp_path / "out", "--max_steps", "2",
                                               f"{flag}={value}"))
    error_line(result, "train", 2, f"{flag[2:]}: expected a finite number, found {value}")
    assert not (tmp_path / "out").exists()


def nan_student(student, tmp_path):
    copy = tmp_path / "nan-student"
    shutil.copytree(student, copy)
    weights = load_file(copy / "model.safetensors")
    weights["model.norm.weight"][3] = float("nan")
    save_file(weights, copy / "model.safetensors", metadata={"format": "pt"})
    return copy


def test_a_student_with_nan_weights_is_refused_by_train_eval_and_generate(student, small_cache, tmp_path):
    bad = nan_student(student, tmp_path)
    needle = f"model: {bad} holds non-finite weights (1 NaN or infinite value in model.norm.weight)"
    error_line(destila_in_process(*train_command(bad, small_cache, tmp_path / "out", "--max_steps", "1")),
               "train", 2, needle)
    assert not (tmp_path / "out").exists()
    # eval runs each model in a fresh process, which reports the same ValueError (the one line of a damaged model:
    # test_damaged_inputs.py); in process here, to spare a second interpreter's start.
    with pytest.raises(ValueError, match=re.escape(needle)):
        evaluate_model(EvalSpec([str(bad)], cache=str(small_cache), max_tokens=64))
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("hello\n")
    error_line(destila_in_process("generate", bad, prompts, "-o", tmp_path / "answers.jsonl"), "generate", 2, needle)
    assert not (tmp_path / "answers.jsonl").exists()


def test_a_diverging_run_stops_at_the_step_and_saves_nothing_over_its_checkpoint(student, small_cache, tmp_path):
    """Adam with a learning rate of 1e30 moves every weight by about 1e30: the next forward overflows."""
    out = tmp_path / "out"
    result = destila_in_process(*train_command(student, small_cache, out, "--max_steps", "6", "--save_steps", "1",
                                               "--learning_rate", "1e30", "--max_grad_norm", "0"))
    line = error_line(result, "train", 2, "at optimizer step 2 (learning rate 1e+30); nothing was saved at or after "
                      "it (checkpoint-1 is as it was)")
    assert line.startswith(("destila train: error: train: the loss became", "destila train: error: train: the "
                            "gradients became non-finite")) and "Lower --learning_rate" in line
    assert not (out / "model.safetensors").exists()  # no final model: the run is not reported as a success
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1"]


def test_the_gradient_check_stops_before_the_optimizer_step(tmp_path):
    model = torch.nn.Linear(3, 2)
    model(torch.ones(1, 3)).sum().backward()
    args = type("Args", (), {"fp16": False, "learning_rate": 1e-3, "output_dir": str(tmp_path)})()
    state = type("State", (), {"global_step": 4})()
    FiniteGradients().on_pre_optimizer_step(args, state, None, model=model)  # finite: nothing happens
    model.weight.grad[0, 1] = float("inf")
    with pytest.raises(NonFiniteTraining, match="gradients became non-finite at optimizer step 5"):
        FiniteGradients().on_pre_optimizer_step(args, state, None, model=model)


def test_the_finite_check_agrees_with_a_direct_one():
    torch.manual_seed(0)
    tensors = {"a": torch.randn(5, 7), "b": torch.randn(3).half(), "c": torch.arange(4), "d": torch.randn(2, 2)}
    assert all_finite(tensors.values()) and nonfinite_tensors(tensors.items()) == []
    tensors["b"][1] = float("-inf")
    tensors["d"][0, 0] = float("nan")
    tensors["d"][1, 1] = float("nan")
    direct = [(n, int((~torch.isfinite(t)).sum())) for n, t in tensors.items()
              if t.is_floating_point() and not torch.isfinite(t).all()]
    assert not all_finite(tensors.values())
    assert nonfinite_tensors(tensors.items()) == direct == [("b", 1), ("d", 2)]
    big = torch.full((4,), 3e38)  # finite, but its sum overflows float32
    assert nonfinite_tensors([("big", big)]) == []


def nan_adapter(student, tmp_path):
    """A LoRA adapter on ``student`` (saved as `destila train --lora_r` saves one) with one NaN weight."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = get_peft_model(AutoModelForCausalLM.from_pretrained(student),
                           LoraConfig(r=2, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with torch.no_grad():
        next(p for name, p in model.named_parameters() if "lora_B" in name)[0, 0] = float("nan")
    folder = tmp_path / "nan-adapter"
    model.save_pretrained(folder)
    config = json.loads((folder / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = str(student)
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return folder


def test_an_adapter_with_nan_weights_is_refused_by_eval_and_loading(student, small_cache, tmp_path):
    from destila.models import load_causal_lm

    bad = nan_adapter(student, tmp_path)
    needle = f"model: {bad} (a LoRA adapter) holds non-finite weights (1 NaN or infinite value in "
    with pytest.raises(ValueError, match=re.escape(needle)):
        load_causal_lm(str(bad))
    with pytest.raises(ValueError, match=re.escape(needle)):
        evaluate_model(EvalSpec([str(bad)], cache=str(small_cache), max_tokens=64))
