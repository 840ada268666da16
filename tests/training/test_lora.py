"""LoRA students: adapters train from a cache and online; the merged model equals the adapter model."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from conftest import pydoc_texts
from destila.data import DataSpec
from destila.training import DistillationArguments, TrainSpec, train_student
from destila.training.peft_student import LoraArguments
from train_helpers import DOCS, SEQ_LEN

peft = pytest.importorskip("peft", reason="LoRA students need destila[peft]")


def args_for(out, **overrides):
    options = dict(output_dir=str(out), max_steps=10, per_device_train_batch_size=4, learning_rate=2e-2,
                   logging_steps=1, save_strategy="no", report_to="none", seed=7, lr_scheduler_type="constant",
                   hard_weight=0.0)  # the KL alone: the tests follow the KL to the teacher
    options.update(overrides)
    return DistillationArguments(**options)


def test_lora_student_learns_saves_an_adapter_and_merges_exactly(tiny_cache, fresh_student, tmp_path):
    out = tmp_path / "lora"
    args = args_for(out, learning_rate=5e-3, eval_fraction=0.2, eval_strategy="steps", eval_steps=10,
                    eval_on_start=True, lora_r=8, lora_target_modules="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                    merge=True)
    result = train_student(TrainSpec(str(fresh_student), out, args, cache=tiny_cache))
    evals = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines() if "eval_kl" in line]
    # Held-out KL to the teacher falls. Rank-8 adapters on a frozen random
    # 2-layer student move it slowly: about 0.7% in these 10 steps.
    assert evals[-1]["eval_kl"] < 0.995 * evals[0]["eval_kl"], evals
    assert (out / "adapter_config.json").is_file() and (out / "adapter_model.safetensors").is_file()
    assert not (out / "model.safetensors").exists()  # the adapter, not a copy of the whole student

    base = AutoModelForCausalLM.from_pretrained(fresh_student)
    start = {k: v.clone() for k, v in base.state_dict().items()}
    adapted = peft.PeftModel.from_pretrained(base, out).eval()
    merged = AutoModelForCausalLM.from_pretrained(result["merged"]).eval()
    assert not any("lora" in key for key in merged.state_dict())  # a plain model
    ids = torch.randint(0, merged.config.vocab_size, (2, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, found = adapted(input_ids=ids).logits, merged(input_ids=ids).logits
    torch.testing.assert_close(found, expected, rtol=0, atol=1e-5)
    moved = (merged.state_dict()["model.layers.0.self_attn.q_proj.weight"] - start["model.layers.0.self_attn.q_proj.weight"])
    assert moved.abs().max() > 1e-4  # the adapter changed the merged weights
    untouched = merged.state_dict()["model.layers.0.self_attn.k_proj.weight"]
    torch.testing.assert_close(untouched, start["model.layers.0.self_attn.k_proj.weight"], rtol=0, atol=0)


def test_lora_student_trains_online(tiny_llama_dir, fresh_student, tmp_path):
    out = tmp_path / "online"
    result = train_student(TrainSpec(str(fresh_student), out,
                                     args_for(out, max_steps=2, online_loss="topk", top_k=8, lora_r=2),
                                     teacher=str(tiny_llama_dir), data=DataSpec(pydoc_texts(DOCS), seq_len=SEQ_LEN)))
    assert result["steps"] == 2 and (out / "adapter_model.safetensors").is_file()


def test_bad_lora_options_are_refused():
    with pytest.raises(ValueError, match="lm_head cannot be adapted"):
        LoraArguments(lora_r=4, lora_target_modules="q_proj,lm_head")
    with pytest.raises(ValueError, match="nothing to merge"):
        LoraArguments(merge=True)
    with pytest.raises(ValueError, match="lora_r: expected a non-negative rank"):
        LoraArguments(lora_r=-1)


@pytest.mark.slow
def test_documented_lora_command(tiny_cache, fresh_student, tmp_path):
    from test_scale_processes import documented, run_documented

    (tmp_path / "student").symlink_to(fresh_student, target_is_directory=True)
    (tmp_path / "cache").symlink_to(tiny_cache, target_is_directory=True)
    launched = run_documented(documented("destila train student/ --cache cache/ -o lora/"), tmp_path,
                              "--max_steps", "3")
    assert "merged student saved to lora/merged" in launched.stdout
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "lora" / "merged")
    assert not any("lora" in key for key in merged.state_dict())


def test_the_adapters_last_line_says_how_to_load_it_where_transformers_cannot(tiny_cache, fresh_student, tmp_path,
                                                                              capsys):
    import importlib.util

    from destila.cli.main import main as cli

    out = tmp_path / "lora"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "-o", str(out), "--use_cpu", "--max_steps", "1",
             "--save_strategy", "no", "--lora_r", "4"])
    assert exit_.value.code in (0, None)
    printed = capsys.readouterr().out.splitlines()
    notes = [line for line in printed if line.startswith("note: AutoModelForCausalLM.from_pretrained")]
    if importlib.util.find_spec("peft.utils.transformers_weight_conversion") is not None:
        assert not notes  # transformers reads the folder (tested in test_lora_outputs.py)
    else:  # transformers would raise ModuleNotFoundError inside peft: the run says what to call instead
        assert len(notes) == 1 and f"(installed {peft.__version__})" in notes[0]
        assert "AutoPeftModelForCausalLM" in notes[0] and "--merge" in notes[0]
    assert printed[printed.index(f"adapter saved to {out}") + 1:] == notes
