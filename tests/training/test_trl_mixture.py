"""TRL's ``datasets:`` mixture section as the online data of `destila train`, read with TRL's own helpers."""

import json

import pytest

from destila.cli.main import main as cli
from destila.cli.train import parse

from conftest import pydoc_texts

pytest.importorskip("trl")


def jsonl(path, texts, field="text"):
    path.write_text("".join(json.dumps({field: text, "other": 1}) + "\n" for text in texts))
    return str(path)


def config(tmp_path, text):
    path = tmp_path / "cfg.yaml"
    path.write_text(text)
    return str(path)


def test_a_mixture_trains_online_with_its_test_split_held_out(tiny_llama_dir, fresh_student, tmp_path, capsys):
    texts = pydoc_texts(8)
    a, b = jsonl(tmp_path / "a.jsonl", texts[:4]), jsonl(tmp_path / "b.jsonl", texts[4:])
    out = tmp_path / "out"
    path = config(tmp_path, f"model_name_or_path: {fresh_student}\nteacher_model_name_or_path: {tiny_llama_dir}\n"
                            f"datasets:\n  - path: json\n    data_files: {a}\n    columns: [text]\n    fraction: 1.0\n"
                            f"  - path: json\n    data_files: {b}\n    fraction: 1.0\n"
                            f"    columns: [text]\ntest_split_size: 0.25\nmax_length: 32\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "--config", path, "-o", str(out), "--max_steps", "1", "--per_device_train_batch_size", "2",
             "--save_strategy", "no", "--use_cpu"])
    assert exit_.value.code == 0, capsys.readouterr().err
    assert "held-out:" in capsys.readouterr().out  # test_split_size held a quarter out and scored it
    record = json.loads((out / "destila_run.json").read_text())
    assert record["objective"]["options"]["eval_fraction"] == 0.25
    source = record["objective"]["targets"]["data"]["source"]
    assert "mixture-" in source  # the mixture's folder, saved once


def test_the_mixture_is_trls_own_reading(tmp_path):
    import datasets
    from trl import DatasetMixtureConfig, get_dataset

    from destila.training.trl_datasets import DatasetMixture

    texts = pydoc_texts(6)
    a, b = jsonl(tmp_path / "a.jsonl", texts[:2]), jsonl(tmp_path / "b.jsonl", texts[2:])
    entries = [{"path": "json", "data_files": a}, {"path": "json", "data_files": b, "columns": ["text"]}]
    folder = DatasetMixture(entries).folder()
    assert DatasetMixture([dict(e) for e in entries]).folder() == folder  # named by its content: saved once
    saved = datasets.load_from_disk(folder)
    # TRL's reading (columns of the first kept, of the second selected), then saved as it is.
    assert saved["text"] == get_dataset(DatasetMixtureConfig(datasets=entries))["train"]["text"] == texts


def test_a_mixture_option_that_cannot_be_honoured_is_refused_by_name(tmp_path, capsys):
    path = config(tmp_path, "model_name_or_path: s\nteacher_model_name_or_path: t\n"
                            "datasets:\n  - path: a.jsonl\n  - path: b.jsonl\n    weight: 2\n"
                            "streaming: true\ntest_split_size: 5\n")
    with pytest.raises(SystemExit) as exit_:
        cli(["train", "-o", str(tmp_path / "o"), "--config", path])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "did you mean" not in err
    assert "datasets: {'path': 'b.jsonl', 'weight': 2} has unknown keys weight; TRL's DatasetConfig takes" in err
    assert "test_split_size: expected a fraction between 0 and 1 (held out as eval_fraction), found 5" in err


def test_streaming_a_mixture_is_refused_by_name(tmp_path, capsys):
    path = config(tmp_path, "datasets:\n  - path: a.jsonl\nstreaming: true\n")
    with pytest.raises(SystemExit):
        cli(["train", "s", "--teacher", "t", "-o", str(tmp_path / "o"), "--config", path])
    assert "streaming true beside datasets (TRL's mixture is loaded whole" in capsys.readouterr().err


def test_a_mixture_beside_a_cache_is_refused_naming_it(tiny_cache, tmp_path, capsys):
    path = config(tmp_path, "datasets:\n  - path: json\n    data_files: a.jsonl\n")
    with pytest.raises(SystemExit):
        cli(["train", "s", "--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", path])
    err = capsys.readouterr().err
    assert "datasets json data_files a.jsonl (the cache in" in err and "was built with data" in err


def test_test_split_size_is_the_held_out_fraction(tiny_cache, tmp_path):
    path = config(tmp_path, "model_name_or_path: s\ntest_split_size: 0.2\n")
    _, args = parse(["--cache", str(tiny_cache), "-o", str(tmp_path / "o"), "--config", path])
    assert args.eval_fraction == 0.2


def test_the_docs_mixture_trains_on_the_mixed_rows(tmp_path, monkeypatch):
    import datasets

    from test_trl_config import doc_block

    from destila.training.trl_datasets import materialised

    texts = pydoc_texts(8)
    jsonl(tmp_path / "a.jsonl", texts[:6])
    jsonl(tmp_path / "b.jsonl", texts[6:])
    (tmp_path / "mixture.yaml").write_text(doc_block("# mixture.yaml", "yaml"))
    monkeypatch.chdir(tmp_path)
    namespace, args = parse(["-o", "o", "--config", "mixture.yaml"])
    assert (namespace.student, namespace.teacher, args.eval_fraction) == ("student/", "teacher/", 0.1)
    mixed = datasets.load_from_disk(materialised(namespace.data))
    assert mixed["text"] == texts[:6] + texts[6:8]  # 3:1 with no file oversampled: 6 rows of a, 2 of b
