"""Training from a cache held as a dataset: an export folder, a loaded or streamed Dataset, Axolotl's columns."""

import json
import logging
import math

import numpy as np
import pytest
import torch

from destila.cache import TopKCache
from destila.cache.dataset import open_cache
from destila.cache.export import ExportSpec, export_cache
from destila.training import DistillationArguments, DistillationTrainer, train_student
from train_helpers import read_log


@pytest.fixture(scope="module")
def exported(tiny_cache, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported") / "export"
    export_cache(ExportSpec(str(tiny_cache), str(out), progress=False))
    return out


def args_for(out, **overrides):
    options = dict(output_dir=str(out), max_steps=4, per_device_train_batch_size=4, logging_steps=1,
                   save_strategy="no", report_to="none", seed=3)
    options.update(overrides)
    return DistillationArguments(**options)


def test_an_export_trains_to_the_losses_of_its_cache(tiny_cache, exported, fresh_student, tmp_path):
    runs = {}
    for name, source in (("cache", tiny_cache), ("export", exported)):
        out = tmp_path / name
        result = train_student(str(fresh_student), out, args_for(out, eval_fraction=0.1), cache=str(source))
        runs[name] = ([r["loss"] for r in read_log(out / "log.jsonl").values()], result["eval"])
    (cache_losses, cache_eval), (export_losses, export_eval) = runs["cache"], runs["export"]
    assert len(cache_losses) == 4
    np.testing.assert_allclose(export_losses, cache_losses, rtol=0, atol=1e-6)
    assert export_eval["eval_kl"] == pytest.approx(cache_eval["eval_kl"], abs=1e-6)


def test_the_trainer_takes_a_loaded_or_streamed_export_without_a_teacher(tiny_cache, exported, fresh_student,
                                                                         tmp_path):
    import datasets

    rows = datasets.load_dataset(str(exported), split="train")
    trainer = DistillationTrainer(model=str(fresh_student), args=args_for(tmp_path / "map"), train_dataset=rows)
    assert trainer.train().global_step == 4
    # The same held-out sequences scored from the cache and from a stream of the export: the same figures.
    stream = datasets.load_dataset(str(exported), split="train", streaming=True).take(12)
    from_stream = trainer.evaluate(eval_dataset=open_cache(stream))
    from_cache = trainer.evaluate(eval_dataset=torch.utils.data.Subset(TopKCache(tiny_cache), range(12)))
    for key in ("eval_kl", "eval_ce", "eval_top1_agreement"):
        assert from_stream[key] == pytest.approx(from_cache[key], abs=1e-6), key
    streamed = DistillationTrainer(model=str(fresh_student), args=args_for(tmp_path / "stream", max_steps=2),
                                   train_dataset=datasets.load_dataset(str(exported), split="train", streaming=True))
    assert streamed.train().global_step == 2 and math.isfinite(streamed.state.log_history[0]["loss"])


def test_a_streamed_export_is_shuffled_by_the_runs_seed_as_the_cache_is(exported, fresh_student, tmp_path):
    import datasets

    def trainer_with(seed):
        stream = datasets.load_dataset(str(exported), split="train", streaming=True)
        return DistillationTrainer(model=str(fresh_student), args=args_for(tmp_path / f"seed{seed}", seed=seed),
                                   train_dataset=stream)

    def first_batch(trainer):
        return next(iter(trainer.get_train_dataloader()))["input_ids"]

    trainer = trainer_with(3)
    in_file_order = torch.stack([item["input_ids"] for item, _ in zip(open_cache(exported), range(4))])
    first = first_batch(trainer)
    assert not torch.equal(first, in_file_order)
    assert torch.equal(first, first_batch(trainer_with(3)))  # the run's seed decides the order
    assert not torch.equal(first, first_batch(trainer_with(4)))
    assert trainer.train_dataset.shuffle == (3, 1000)
    # Every sequence once per epoch, and another order in the next epoch.
    rows = lambda stream: [tuple(item["input_ids"].tolist()) for item in stream]  # noqa: E731
    epoch_0, expected = rows(trainer.train_dataset), rows(open_cache(exported))
    assert sorted(epoch_0) == sorted(expected) and epoch_0 != expected
    trainer.train_dataset.set_epoch(1)
    assert rows(trainer.train_dataset) != epoch_0


def axolotl_rows(cache, renormalise: bool = False):
    """The cache's items in Axolotl's KD columns: targets at t for token t+1, a per-entry mask, no rest mass."""
    rows = []
    for i in range(len(cache)):
        item = cache[i]
        trained = (item["labels"] != -100)[:, None].expand_as(item["topk_ids"])
        logprobs = item["topk_logprobs"].float()
        if renormalise:
            logprobs = torch.log_softmax(logprobs, dim=-1)
        rows.append({"input_ids": item["input_ids"].tolist(), "labels": item["input_ids"].tolist(),
                     "target_token_ids": item["topk_ids"].tolist(),
                     "target_logprobs": torch.where(trained, logprobs, -1e9).tolist(),
                     "target_mask": trained.int().tolist()})
    return rows


def test_axolotl_columns_train_and_say_what_they_assume_about_the_tail(tiny_cache, fresh_student, tmp_path, caplog):
    import datasets

    cache = TopKCache(tiny_cache)
    rows = datasets.Dataset.from_list(axolotl_rows(cache))
    with caplog.at_level(logging.WARNING, logger="destila.cache"):
        reader = open_cache(rows)
    assert "no rest-mass column, so the rest is taken as 1 − Σ exp(target_logprobs)" in caplog.text
    assert reader.vocab_size is None  # not recorded: the trainer takes the student's
    reader.assume_vocab_size(cache.vocab_size)
    for i in (0, 7):
        found, expected = reader[i], cache[i]
        for key in ("input_ids", "position_ids", "labels", "topk_ids"):
            assert torch.equal(found[key], expected[key]), key
        assert torch.equal(found["topk_logprobs"], expected["topk_logprobs"].float())
        trained = expected["labels"] != -100
        mass = torch.exp(expected["topk_logprobs"][trained].double()).sum(-1)
        torch.testing.assert_close(found["tail_logmass"][trained].double(), torch.log1p(-mass), rtol=0, atol=1e-6)
        # the float16 log-probs' rounding is all that separates the assumed rest from the exact one
        assert (found["tail_logmass"][trained] - expected["tail_logmass"][trained]).abs().max() < 0.05
    trainer = DistillationTrainer(model=str(fresh_student), args=args_for(tmp_path / "axolotl", max_steps=2),
                                  train_dataset=rows)
    assert trainer.train().global_step == 2


def test_renormalised_axolotl_log_probs_are_read_as_an_empty_rest(tiny_cache, caplog):
    import datasets

    cache = TopKCache(tiny_cache)
    with caplog.at_level(logging.WARNING, logger="destila.cache"):
        reader = open_cache(datasets.Dataset.from_list(axolotl_rows(cache, renormalise=True)[:6]))
    assert "renormalised over the top-K" in caplog.text
    item = reader[0]
    assert torch.isneginf(item["tail_logmass"][item["labels"] != -100]).all()


def test_axolotl_rows_whose_mass_exceeds_one_are_refused(tiny_cache):
    import datasets

    rows = axolotl_rows(TopKCache(tiny_cache))[:2]
    rows[0]["target_logprobs"][3] = [0.0] * len(rows[0]["target_logprobs"][3])  # K entries of probability 1
    with pytest.raises(ValueError, match="sum to a probability of .* > 1; expected log-probabilities"):
        open_cache(datasets.Dataset.from_list(rows))


def test_rows_without_targets_are_still_refused_without_a_teacher(fresh_student, tmp_path):
    import datasets

    with pytest.raises(ValueError, match="holds no teacher targets"):
        DistillationTrainer(model=str(fresh_student), args=args_for(tmp_path / "x"),
                            train_dataset=datasets.Dataset.from_list([{"text": "hello"}]))


def test_train_cli_takes_an_export_folder(exported, fresh_student, tmp_path):
    from destila.cli.main import main

    out = tmp_path / "cli"
    with pytest.raises(SystemExit) as exit_info:
        main(["train", str(fresh_student), "--cache", str(exported), "-o", str(out), "--max_steps", "2",
              "--save_strategy", "no"])
    assert exit_info.value.code == 0
    recorded = json.loads((out / "destila_run.json").read_text())["objective"]["targets"]["cache"]
    assert not recorded.startswith("/") and (out / recorded).resolve() == exported.resolve()  # relative to the run


def test_export_rows_without_their_record_read_the_same_and_say_what_they_assume(tiny_cache, exported, caplog):
    """Rows whose card lost the record (``Dataset.push_to_hub`` keeps no description): read by their columns."""
    import datasets

    loaded = datasets.load_dataset(str(exported), split="train")
    bare = datasets.Dataset(loaded.data)  # the same Arrow table, no DatasetInfo
    assert not bare.info.description
    with caplog.at_level(logging.WARNING, logger="destila.cache"):
        reader = open_cache(bare)
    assert "without destila's record" in caplog.text and reader.vocab_size is None
    cache = TopKCache(tiny_cache)
    reader.assume_vocab_size(cache.vocab_size)
    assert reader.top_k == cache.top_k and reader.logprob_dtype == cache.logprob_dtype
    for i in (0, 5):
        found, expected = reader[i], cache[i]
        for key in expected:
            assert torch.equal(found[key], expected[key]), key


@pytest.fixture(scope="module")
def saved_axolotl(tiny_cache, tmp_path_factory):
    """Axolotl's KD columns of the cache's first 40 sequences, saved with Dataset.save_to_disk, and as a DatasetDict."""
    import datasets

    rows = datasets.Dataset.from_list(axolotl_rows(TopKCache(tiny_cache))[:40])
    root = tmp_path_factory.mktemp("saved")
    rows.save_to_disk(root / "rows")
    datasets.DatasetDict({"train": rows, "test": rows.select(range(4))}).save_to_disk(root / "dict")
    return rows, root / "rows", root / "dict"


def test_axolotl_rows_saved_to_a_folder_read_as_the_rows_in_memory(saved_axolotl, tiny_cache):
    rows, folder, split_folder = saved_axolotl
    in_memory = open_cache(rows)
    for reader in (open_cache(str(folder)), open_cache(str(split_folder))):
        assert len(reader) == len(in_memory) == 40
        for i in (0, 7, 39):
            for key, value in in_memory[i].items():
                assert torch.equal(reader[i][key], value), (i, key)
    streamed = open_cache(str(folder), streaming=True)
    assert [item["input_ids"].tolist() for item in streamed] == [in_memory[i]["input_ids"].tolist()
                                                                 for i in range(40)]


def test_a_saved_axolotl_folder_trains_and_evaluates_from_the_command_line(saved_axolotl, fresh_student, tmp_path,
                                                                            capsys):
    from destila.cli.main import main as cli
    from destila.eval import EvalSpec, evaluate_models

    _, folder, _ = saved_axolotl
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(folder), "-o", str(out), "--use_cpu", "--max_steps", "2",
             "--save_strategy", "no"])
    assert exit_.value.code in (0, None), capsys.readouterr().err
    assert (out / "model.safetensors").is_file()
    (scores,) = evaluate_models(EvalSpec([str(out)], cache=str(folder), max_tokens=32 * 8, new_tokens=2),
                                isolated=False)
    assert math.isfinite(scores["kl_to_teacher"]) and scores["kl_to_teacher"] > 0


def test_a_saved_folder_of_other_rows_is_refused_in_one_line(fresh_student, tmp_path, capsys):
    import datasets

    from destila.cli.main import main as cli

    datasets.Dataset.from_list([{"text": "hello"}]).save_to_disk(tmp_path / "texts")
    capsys.readouterr()  # the saving bar
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(fresh_student), "--cache", str(tmp_path / "texts"), "-o", str(tmp_path / "out"),
             "--use_cpu", "--max_steps", "1"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and err.count("\n") == 0
    assert "columns text; expected a cache's rows" in err and "Axolotl's" in err
    assert not (tmp_path / "out").exists()
