"""DistillationTrainer answers in the Trainer's shapes: dicts of eval sets, timing keys, predictions, pushes, LoRA
targets."""

import numpy as np
import pytest
import torch
from torch.utils.data import Subset
from transformers.trainer_utils import PredictionOutput

from destila.cache.dataset import open_cache
from destila.cli.main import main as cli
from destila.training import DistillationArguments, DistillationTrainer

RUN = dict(max_steps=1, per_device_train_batch_size=2, per_device_eval_batch_size=8, save_strategy="no",
           report_to="none", use_cpu=True)


def trainer_for(student, cache, out, **kwargs):
    return DistillationTrainer(model=str(student), args=DistillationArguments(output_dir=str(out), **RUN),
                               cache=cache, **kwargs)


def test_a_dict_of_eval_sets_is_evaluated_set_by_set(tiny_cache, fresh_student, tmp_path):
    held = open_cache(tiny_cache)
    trainer = trainer_for(fresh_student, tiny_cache, tmp_path, eval_dataset={"all": held, "few": Subset(held, [0, 1])})
    metrics = trainer.evaluate()
    for name in ("all", "few"):
        for key in ("loss", "kl", "ce", "ppl", "top1_agreement", "runtime", "samples_per_second"):
            assert f"eval_{name}_{key}" in metrics, (name, key)
    assert metrics["eval_few_samples_per_second"] > 0
    assert metrics["eval_all_loss"] != metrics["eval_few_loss"]  # each set's own figures
    one = trainer.evaluate(held, metric_key_prefix="test")  # one set, named by the caller
    assert one["test_loss"] == pytest.approx(metrics["eval_all_loss"])


def test_evaluate_reports_the_trainers_timing_keys(tiny_cache, fresh_student, tmp_path):
    trainer = trainer_for(fresh_student, tiny_cache, tmp_path, eval_dataset=Subset(open_cache(tiny_cache), [0, 1, 2]))
    metrics = trainer.evaluate()
    assert metrics["eval_runtime"] > 0 and metrics["eval_steps_per_second"] > 0
    assert metrics["eval_samples_per_second"] > 0


def test_predict_returns_the_trainers_prediction_output_with_the_objectives_metrics(tiny_cache, fresh_student,
                                                                                   tmp_path):
    held = Subset(open_cache(tiny_cache), [0, 1, 2])
    trainer = trainer_for(fresh_student, tiny_cache, tmp_path)
    output = trainer.predict(held)
    assert isinstance(output, PredictionOutput)
    vocab = trainer.model.config.vocab_size
    assert isinstance(output.predictions, np.ndarray) and output.predictions.shape == (3, 32, vocab)
    assert isinstance(output.label_ids, np.ndarray) and output.label_ids.shape == (3, 32)
    first = held[0]
    with torch.no_grad():
        logits = trainer.model(input_ids=torch.as_tensor(first["input_ids"])[None]).logits[0]
    np.testing.assert_allclose(output.predictions[0], logits.numpy(), atol=1e-5)
    # Hugging Face's labels: labels[t] is token t (the model shifts them), the first one never predicted.
    assert output.label_ids[0, 0] == -100
    assert (output.label_ids[0, 1:] == np.asarray(first["input_ids"])[1:]).all()
    expected = trainer.evaluate(held, metric_key_prefix="test")
    for key in ("loss", "kl", "ce", "ppl", "top1_agreement"):
        assert output.metrics[f"test_{key}"] == pytest.approx(expected[f"test_{key}"], rel=1e-6), key
    assert output.metrics["test_runtime"] > 0 and output.metrics["test_samples_per_second"] > 0
    assert not [key for key in output.metrics if not key.startswith("test_")]


def test_predict_calls_compute_metrics_and_honours_prediction_loss_only(tiny_cache, fresh_student, tmp_path):
    held = Subset(open_cache(tiny_cache), [0, 1])
    seen = []

    def compute_metrics(prediction):
        seen.append(prediction.predictions.shape)
        return {"rows": float(prediction.label_ids.shape[0])}

    output = trainer_for(fresh_student, tiny_cache, tmp_path, compute_metrics=compute_metrics).predict(held)
    assert output.metrics["test_rows"] == 2.0 and len(seen) == 1
    quiet = DistillationTrainer(model=str(fresh_student), cache=tiny_cache, args=DistillationArguments(
        output_dir=str(tmp_path / "q"), prediction_loss_only=True, **RUN)).predict(held)
    assert quiet.predictions is None and quiet.label_ids is None and "test_kl" in quiet.metrics


def test_push_to_hub_from_python_without_a_hub_is_the_clis_line(tiny_cache, fresh_student, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    trainer = trainer_for(fresh_student, tiny_cache, tmp_path)
    with pytest.raises(ValueError) as error:
        trainer.push_to_hub()
    assert str(error.value) == ("push_to_hub: the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE is set); train "
                                "without --push_to_hub, then upload the output folder once online (`hf upload NAME OUT`)")


def test_a_lora_target_that_matches_nothing_is_refused_naming_it(tiny_cache, fresh_student, tmp_path, capsys):
    pytest.importorskip("peft", reason="LoRA students need destila[peft]")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tiny_cache), "-o", str(out), "--use_cpu", "--max_steps", "1",
             "--lora_r", "4", "--lora_target_modules", "q_proj,nope"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0
    assert "lora_target_modules: nope matches no module of this LlamaForCausalLM" in err
    assert "its linear layers are down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj" in err
    assert not (out / "adapter_config.json").exists()
