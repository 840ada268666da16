"""The calls a TRL user writes: model as a path, peft_config, LoRA fields, eval_fraction, eval_strategy."""

import pytest

from destila.cache import TopKCache
from destila.training import DistillationArguments, DistillationTrainer
from destila.training.datasets import split_indices


def arguments(out, **overrides):
    options = dict(output_dir=str(out), max_steps=2, per_device_train_batch_size=4, logging_steps=1,
                   save_strategy="no", report_to="none", use_cpu=True, dataloader_num_workers=0)
    return DistillationArguments(**{**options, **overrides})


def test_eval_fraction_holds_out_the_split_destila_eval_scores(tiny_cache, fresh_student, tmp_path):
    args = arguments(tmp_path / "o", eval_fraction=0.25, eval_strategy="steps", eval_steps=2)
    trainer = DistillationTrainer(model=str(fresh_student), args=args, cache=tiny_cache)
    count = len(TopKCache(tiny_cache))
    train, held = trainer.train_dataset.indices, trainer.eval_dataset.indices
    assert held == split_indices(count, 0.25)[1]  # `destila eval --eval-fraction 0.25` scores these
    assert not set(train) & set(held) and sorted(train + held) == list(range(count))
    # What the training loader yields is drawn from the training part only.
    seen = {tuple(trainer.train_dataset[i]["input_ids"].tolist()) for i in range(len(train))}
    cache = TopKCache(tiny_cache)
    assert not seen & {tuple(cache[i]["input_ids"].tolist()) for i in held}
    trainer.train()  # eval_strategy="steps" finds its eval_dataset
    assert any("eval_kl" in record for record in trainer.state.log_history)


def test_eval_fraction_and_an_eval_dataset_are_refused_together(tiny_cache, fresh_student, tmp_path):
    with pytest.raises(ValueError, match="give one of them"):
        DistillationTrainer(model=str(fresh_student), args=arguments(tmp_path / "o", eval_fraction=0.2),
                            cache=tiny_cache, eval_dataset=TopKCache(tiny_cache))


def test_messages_eval_dataset_beside_a_cache_is_refused_at_once(tiny_cache, fresh_student, tmp_path):
    import datasets

    chats = datasets.Dataset.from_list([{"messages": [{"role": "user", "content": "hi"},
                                                      {"role": "assistant", "content": "hello"}]}])
    with pytest.raises(ValueError, match="eval_dataset is a datasets.Dataset, which holds no teacher targets"):
        DistillationTrainer(model=str(fresh_student), args=arguments(tmp_path / "o"), cache=tiny_cache,
                            eval_dataset=chats)


def test_model_as_a_path_loads_model_and_tokenizer(tiny_cache, fresh_student, tmp_path):
    trainer = DistillationTrainer(model=str(fresh_student), args=arguments(tmp_path / "o"), cache=tiny_cache)
    assert trainer.processing_class is not None and trainer.model.config.num_hidden_layers == 2
    assert trainer.train().global_step == 2


def test_peft_config_wraps_the_student_as_trl_does(tiny_cache, fresh_student, tmp_path):
    from peft import LoraConfig, PeftModel

    trainer = DistillationTrainer(model=str(fresh_student), args=arguments(tmp_path / "o"), cache=tiny_cache,
                                  peft_config=LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    assert isinstance(trainer.model, PeftModel)
    trainable = [n for n, p in trainer.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)
    assert trainer.train().global_step == 2
    with pytest.raises(ValueError, match="lm_head cannot be adapted"):
        DistillationTrainer(model=str(fresh_student), args=arguments(tmp_path / "p"), cache=tiny_cache,
                            peft_config=LoraConfig(r=4, target_modules=["q_proj", "lm_head"]))


def test_lora_fields_live_in_the_arguments(tiny_cache, fresh_student, tmp_path):
    from peft import PeftModel

    args = arguments(tmp_path / "o", lora_r=4, lora_target_modules="q_proj,v_proj")
    assert args.lora_arguments().lora_alpha == 8.0
    trainer = DistillationTrainer(model=str(fresh_student), args=args, cache=tiny_cache)
    assert isinstance(trainer.model, PeftModel) and trainer.model.peft_config["default"].r == 4
    with pytest.raises(ValueError, match="lora_r: expected a non-negative rank"):
        arguments(tmp_path / "p", lora_r=-1)
