"""A tied-embedding student reloads from its checkpoints (``--resume``, the best model at the end) with no
"missing keys: lm_head.weight" warning, and with the checkpoint's weights, head included."""

import logging

import pytest
import torch
from safetensors.torch import load_file
from transformers import TrainerCallback

from destila.training import DistillationArguments, DistillationTrainer

RUN = dict(per_device_train_batch_size=2, per_device_eval_batch_size=8, report_to="none", use_cpu=True,
           save_strategy="steps", save_steps=1, learning_rate=1e-2)


@pytest.fixture
def trainer_messages():
    """The messages the Trainer's logger gives while the test runs."""
    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logger = logging.getLogger("transformers.trainer")
    logger.addHandler(handler)
    yield seen
    logger.removeHandler(handler)


class HeadAtStart(TrainerCallback):
    """The output head's weight when training begins: after the Trainer loaded the checkpoint it resumes."""

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.head = model.get_output_embeddings().weight.detach().clone()


def _tied(model) -> bool:
    return model.get_output_embeddings().weight is model.get_input_embeddings().weight


def test_resume_loads_a_tied_head_without_a_missing_key_warning(tiny_cache, fresh_student, tmp_path, trainer_messages):
    out = tmp_path / "out"
    first = DistillationTrainer(model=str(fresh_student), cache=tiny_cache,
                                args=DistillationArguments(output_dir=str(out), max_steps=2, **RUN))
    assert _tied(first.model)
    first.train()
    saved = load_file(out / "checkpoint-2" / "model.safetensors")
    assert "lm_head.weight" not in saved  # the tied head is left out of the file: the case at hand
    start = HeadAtStart()
    again = DistillationTrainer(model=str(fresh_student), cache=tiny_cache, callbacks=[start],
                                args=DistillationArguments(output_dir=str(out), max_steps=3, **RUN))
    again.train(resume_from_checkpoint=str(out / "checkpoint-2"))
    assert not [m for m in trainer_messages if "missing keys" in m], trainer_messages
    assert _tied(again.model)
    embed = saved["model.embed_tokens.weight"]
    assert not torch.equal(embed, load_file(fresh_student / "model.safetensors")["model.embed_tokens.weight"])
    torch.testing.assert_close(start.head, embed, rtol=0, atol=0)  # the head resumed is the checkpoint's


def test_the_best_model_loads_without_a_missing_key_warning(tiny_cache, fresh_student, tmp_path, trainer_messages):
    out = tmp_path / "out"
    trainer = DistillationTrainer(model=str(fresh_student), cache=tiny_cache, args=DistillationArguments(
        output_dir=str(out), max_steps=3, eval_strategy="steps", eval_steps=1, load_best_model_at_end=True,
        eval_fraction=0.1, **RUN))
    trainer.train()
    assert trainer.state.best_model_checkpoint is not None
    assert not [m for m in trainer_messages if "missing keys" in m], trainer_messages
    assert _tied(trainer.model)
    best = load_file(f"{trainer.state.best_model_checkpoint}/model.safetensors")
    torch.testing.assert_close(trainer.model.get_output_embeddings().weight.detach(),
                               best["model.embed_tokens.weight"], rtol=0, atol=0)


def test_only_a_head_that_is_the_embedding_is_declared_left_out(tmp_path):
    from transformers import AutoModelForCausalLM, LlamaConfig

    from destila.training.tied_weights import declare_tied_unsaved

    shape = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1)
    tied = AutoModelForCausalLM.from_config(LlamaConfig(tie_word_embeddings=True, **shape))
    assert declare_tied_unsaved(tied) == {"lm_head.weight"}
    own_head = AutoModelForCausalLM.from_config(LlamaConfig(tie_word_embeddings=False, **shape))
    assert declare_tied_unsaved(own_head) == set()
    own_head.save_pretrained(tmp_path / "own")
    assert "lm_head.weight" in load_file(tmp_path / "own" / "model.safetensors")  # a head of its own is kept
