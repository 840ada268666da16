"""The shipped engine configs (examples/) load, and engines that cannot run here are refused, not ignored."""

import json
from pathlib import Path

import pytest
import yaml
from transformers import TrainingArguments

from destila.training import DistillationArguments

EXAMPLES = Path(__file__).parents[2] / "examples"


@pytest.mark.parametrize("stage", [2, 3])
def test_deepspeed_examples_are_valid_trainer_configs(stage, tmp_path):
    pytest.importorskip("deepspeed", reason="needs the deepspeed package (destila[deepspeed])")
    path = EXAMPLES / f"deepspeed_zero{stage}.json"
    args = TrainingArguments(output_dir=str(tmp_path), deepspeed=str(path), per_device_train_batch_size=3,
                             gradient_accumulation_steps=2, bf16=False)
    config = args.hf_deepspeed_config
    assert config.get_value("zero_optimization.stage") == stage
    assert config.is_zero3() == (stage == 3)
    # "auto" entries were filled from the arguments, as the Trainer will on a GPU.
    assert config.get_value("train_micro_batch_size_per_gpu") == 3
    assert config.get_value("gradient_accumulation_steps") == 2
    assert json.loads(path.read_text())["zero_optimization"]["stage"] == stage


def test_deepspeed_without_a_gpu_is_refused(tmp_path):
    with pytest.raises(ValueError, match="deepspeed: DeepSpeed needs a GPU"):
        DistillationArguments(output_dir=str(tmp_path), deepspeed=str(EXAMPLES / "deepspeed_zero2.json"))


def test_fsdp_example_holds_only_trainer_options():
    values = yaml.safe_load((EXAMPLES / "fsdp_full_shard.yaml").read_text())
    assert values["fsdp"] == "full_shard" and values["fsdp_config"]["version"] == 2
    known = {name for name in DistillationArguments.__dataclass_fields__}
    assert set(values) <= known


def test_bf16_trains_on_cpu(tiny_cache, fresh_student, tmp_path):
    """--bf16 without a GPU: accepted (no use_cpu needed), autocast runs, the fused loss stays float32."""
    from destila.training import TrainSpec, train_student

    out = tmp_path / "bf16"
    args = DistillationArguments(output_dir=str(out), bf16=True, max_steps=2, per_device_train_batch_size=4,
                                 logging_steps=1, save_strategy="no")
    assert args.use_cpu and args.bf16
    result = train_student(TrainSpec(str(fresh_student), out, args, cache=tiny_cache))
    losses = [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines() if '"loss"' in line]
    assert result["steps"] == 2 and len(losses) == 2 and all(0 < loss < 10 for loss in losses)
