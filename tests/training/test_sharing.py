"""Ready to share: the model card says what the student was distilled from and how, the files meant for upload
name no local folder, and `--push_to_hub` without a Hub fails at once in one line."""

import json

import pytest
from huggingface_hub import ModelCard

from destila.cache import TopKCache
from destila.training import DistillationArguments, DistillationTrainer, train_student


@pytest.fixture(scope="module")
def trained(tiny_cache, fresh_student, tmp_path_factory):
    out = tmp_path_factory.mktemp("shared") / "student-out"
    args = DistillationArguments(output_dir=str(out), max_steps=2, per_device_train_batch_size=4, save_strategy="no",
                                 report_to="none", eval_fraction=0.1, hard_weight=0.5, seed=4)
    return out, train_student(str(fresh_student), out, args, cache=str(tiny_cache))


def test_the_card_names_teacher_cache_data_objective_and_held_out_figures(trained, tiny_cache):
    out, result = trained
    card = ModelCard.load(out / "README.md")
    manifest = TopKCache(tiny_cache).manifest
    assert card.data.library_name == "transformers" and "destila" in card.data.tags
    text = card.text
    for expected in (manifest.teacher_config_hash, manifest.teacher_weight_fingerprint, manifest.tokenizer_fingerprint,
                     manifest.data_fingerprint, manifest.ids_fingerprint, f"top-{manifest.top_k} log-probs",
                     f"{manifest.sequences:,} sequences of {manifest.seq_len} tokens", "forward_kl",
                     "hard (cross-entropy) weight 0.5", "2 optimizer steps", "0.1 of the training sequences"):
        assert expected in text, expected
    assert f"| kl | {result['eval']['eval_kl']:.4g} |" in text
    assert f"| ce | {result['eval']['eval_ce']:.4g} |" in text


def test_the_cards_metadata_holds_the_held_out_figures_as_eval_results(trained):
    out, result = trained
    data = ModelCard.load(out / "README.md").data
    figures = {entry.metric_type: entry.metric_value for entry in data.eval_results}
    for name in ("loss", "kl", "ce", "ppl", "top1_agreement"):
        assert figures[name] == pytest.approx(result["eval"][f"eval_{name}"]), name
    assert "runtime" not in figures  # how fast, not how good
    entry = data.eval_results[0]
    assert (entry.task_type, entry.dataset_name, entry.dataset_split) == (
        "text-generation", "cache", "0.1 of the training sequences, held out")
    assert data.model_name == out.name
    assert data.base_model is None and data.datasets is None  # a fresh local student, a cache of local data


def test_a_student_cut_from_a_hub_model_names_it_as_base_model_and_hub_data_as_datasets(tiny_cache, fresh_student,
                                                                                        tmp_path, monkeypatch):
    import dataclasses
    import shutil

    from destila.training.sharing import model_card

    student = shutil.copytree(fresh_student, tmp_path / "student")
    record = json.loads((student / "destila_student.json").read_text())
    record.update(teacher="HuggingFaceTB/SmolLM2-135M-Instruct", method="cut")  # as `student init HUB_ID` writes it
    (student / "destila_student.json").write_text(json.dumps(record))
    trainer = DistillationTrainer(model=str(student), cache=str(tiny_cache), args=DistillationArguments(
        output_dir=str(tmp_path / "out"), max_steps=1, save_strategy="no", report_to="none", use_cpu=True))
    cache = trainer.train_dataset
    monkeypatch.setattr(cache, "manifest", dataclasses.replace(cache.manifest, data_source="HuggingFaceFW/fineweb-edu"))
    data = ModelCard(model_card(trainer)).data
    assert data.base_model == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert data.datasets == ["HuggingFaceFW/fineweb-edu"]
    assert data.eval_results is None  # no evaluation ran


def test_shareable_files_name_no_local_folder(trained, tiny_cache, fresh_student):
    out, _ = trained
    for name in ("README.md", "destila_run.json"):
        text = (out / name).read_text()
        for local in (str(tiny_cache), str(fresh_student), str(out.parent)):
            assert local not in text, (name, local)
    record = json.loads((out / "destila_run.json").read_text())["objective"]
    assert (out / record["targets"]["cache"]).resolve() == tiny_cache.resolve()


def test_push_to_hub_without_a_hub_is_one_line_before_anything_loads(tiny_cache, fresh_student, tmp_path, capsys):
    from destila.cli.main import main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_info:  # the test environment sets HF_HUB_OFFLINE (conftest)
        main(["train", str(fresh_student), "--cache", str(tiny_cache), "-o", str(out), "--max_steps", "1",
              "--push_to_hub"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "destila train: error: push_to_hub: the Hugging Face Hub cannot be reached (HF_HUB_OFFLINE is set); train "
        "without --push_to_hub, then upload the output folder once online (`hf upload NAME OUT`)"]
    assert not out.exists()  # refused before the output folder was claimed


def test_the_trainer_refuses_push_to_hub_offline_and_writes_destilas_card(tiny_cache, fresh_student, tmp_path):
    args = dict(per_device_train_batch_size=4, save_strategy="no", report_to="none", max_steps=1)
    with pytest.raises(ValueError, match="push_to_hub: the Hugging Face Hub cannot be reached"):
        DistillationTrainer(model=str(fresh_student), args=DistillationArguments(
            output_dir=str(tmp_path / "p"), push_to_hub=True, **args), cache=str(tiny_cache))
    trainer = DistillationTrainer(model=str(fresh_student), args=DistillationArguments(
        output_dir=str(tmp_path / "q"), **args), cache=str(tiny_cache))
    trainer.train()
    trainer.create_model_card()  # what Trainer.push_to_hub calls before uploading
    card = (tmp_path / "q" / "README.md").read_text()
    assert "distilled with [destila]" in card and "No held-out evaluation was run" in card
