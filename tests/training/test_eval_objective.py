"""Nothing accepted and ignored: `eval_loss` is the training objective (the yardstick KL and CE beside it under their
own names), `compute_metrics` is called as the Trainer calls it, and `label_smoothing_factor` is refused."""

import pytest
import torch

from destila import distill_loss
from destila.cache import TopKCache
from destila.data import collate, hf_labels
from destila.models import final_hidden_states, output_head
from destila.targets.truncate import with_top_k
from destila.training import DistillationArguments, DistillationTrainer

HELD_OUT = 6


def trainer_for(tiny_cache, student, out, **options):
    options = {"hard_weight": 0.0, **options}  # the KL alone unless asked, as the oracle's distill_loss
    args = DistillationArguments(output_dir=str(out), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                                 save_strategy="no", report_to="none", max_steps=1, **options)
    cache = TopKCache(tiny_cache)
    return DistillationTrainer(model=str(student), args=args, train_dataset=cache,
                               eval_dataset=torch.utils.data.Subset(cache, range(HELD_OUT)))


def oracle(trainer, tiny_cache, top_k=None, **options) -> float:
    """The loss over all held-out rows at once, through the dense reference implementation."""
    batch = collate([TopKCache(tiny_cache)[i] for i in range(HELD_OUT)])
    batch = with_top_k(batch, top_k)
    model = trainer.model.eval()
    with torch.no_grad():
        hidden = final_hidden_states(model, batch["input_ids"], position_ids=batch["position_ids"])
        weight, bias = output_head(model)
        return distill_loss(hidden.flatten(0, 1), weight, batch["topk_ids"].flatten(0, 1),
                            batch["topk_logprobs"].flatten(0, 1), batch["tail_logmass"].flatten(),
                            batch["labels"].flatten(), bias=bias, impl="dense", **options).item()


def test_eval_loss_is_the_training_objective_with_the_yardstick_beside_it(tiny_cache, fresh_student, tmp_path):
    objective = dict(divergence="reverse_kl", hard_weight=0.5)
    trainer = trainer_for(tiny_cache, fresh_student, tmp_path / "a", top_k=8, **objective)
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] == pytest.approx(oracle(trainer, tiny_cache, top_k=8, **objective), rel=1e-5)
    assert metrics["eval_kl"] == pytest.approx(oracle(trainer, tiny_cache), rel=1e-5)  # forward KL, the cache's K
    assert abs(metrics["eval_loss"] - metrics["eval_kl"]) > 1e-3
    default = trainer_for(tiny_cache, fresh_student, tmp_path / "b").evaluate()
    assert default["eval_loss"] == pytest.approx(default["eval_kl"], rel=1e-12)  # the objective is the yardstick


def test_compute_metrics_is_called_once_with_the_held_out_logits_and_labels(tiny_cache, fresh_student, tmp_path):
    calls = []

    def compute_metrics(prediction):
        calls.append(prediction)
        logits, labels = prediction.predictions, prediction.label_ids
        predicted, target = logits[:, :-1].argmax(-1), labels[:, 1:]  # Hugging Face labels: the model shifts them
        scored = target != -100
        return {"next_token_accuracy": float((predicted[scored] == target[scored]).mean())}

    trainer = trainer_for(tiny_cache, fresh_student, tmp_path / "m")
    trainer.compute_metrics = compute_metrics
    metrics = trainer.evaluate()
    assert len(calls) == 1
    (prediction,) = calls
    items = [TopKCache(tiny_cache)[i] for i in range(HELD_OUT)]
    batch = collate(items)
    assert prediction.predictions.shape == (HELD_OUT, batch["input_ids"].shape[1], trainer.model.config.vocab_size)
    assert (prediction.label_ids == hf_labels(batch["labels"]).numpy()).all()  # Hugging Face's convention
    with torch.no_grad():
        logits = trainer.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    expected = batch["labels"]
    scored = expected != -100
    accuracy = (logits.argmax(-1)[scored] == expected[scored]).double().mean().item()
    assert metrics["eval_next_token_accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert "eval_kl" in metrics and "eval_loss" in metrics


def test_label_smoothing_is_refused_rather_than_ignored(tiny_cache, fresh_student, tmp_path):
    with pytest.raises(ValueError, match="label_smoothing_factor: 0.1 smooths the labels"):
        trainer_for(tiny_cache, fresh_student, tmp_path / "s", label_smoothing_factor=0.1)
