"""Held-out inputs are checked before any model loads: a damaged eval cache in `train_student`, and the damaged
rows or empty data of `eval`, are refused without the seconds a model load costs.

Loading a model here fails the test (``load_causal_lm`` replaced by one that raises), so each refusal must come
first.
"""

from __future__ import annotations

import shutil

import pytest
from export_damage import mass_two_resigned
from fault_helpers import small_cache, small_export, student  # noqa: F401 (fixtures)


class ModelLoaded(AssertionError):
    pass


def _no_model(*args, **kwargs):
    raise ModelLoaded("a model was loaded before the held-out input was checked")


@pytest.fixture
def damaged_export(small_export, tmp_path):  # noqa: F811
    export = shutil.copytree(small_export, tmp_path / "export")
    mass_two_resigned(export, tmp_path)
    return export


def test_a_damaged_eval_cache_is_refused_before_the_student_loads(  # noqa: F811
        small_cache, small_export, student, tmp_path, monkeypatch):
    import destila.training.run as run
    from destila.training import DistillationArguments, train_student

    files = shutil.copytree(small_export, tmp_path / "files-damaged")
    (files / "data" / "train-00000-of-00002.parquet").write_bytes(b"PAR1")  # a file the checks on open refuse
    monkeypatch.setattr(run, "load_causal_lm", _no_model)
    out = tmp_path / "run"
    args = DistillationArguments(output_dir=str(out), max_steps=1, per_device_train_batch_size=4,
                                 save_strategy="no", report_to="none", eval_fraction=0.0)
    with pytest.raises(ValueError, match=f"export {files}: data/train-00000-of-00002.parquet: size"):
        train_student(str(student), out, args, cache=str(small_cache), eval_cache=str(files))
    assert not out.exists()


def test_eval_reads_the_rows_of_a_cache_before_the_model_loads(damaged_export, student, monkeypatch):  # noqa: F811
    import destila.eval.run as run
    from destila.eval.spec import EvalSpec

    monkeypatch.setattr(run, "load_causal_lm", _no_model)
    with pytest.raises(ValueError, match="do not sum to 1"):
        run.evaluate_model(EvalSpec([str(student)], cache=str(damaged_export), new_tokens=2))


def test_eval_refuses_empty_data_before_the_model_loads(student, tmp_path, monkeypatch):  # noqa: F811
    import destila.eval.run as run
    from destila.data import DataSpec
    from destila.eval.spec import EvalSpec

    empty = tmp_path / "empty.jsonl"
    empty.write_text('{"text": ""}\n{"text": ""}\n')
    monkeypatch.setattr(run, "load_causal_lm", _no_model)
    with pytest.raises(ValueError, match="holds no text"):
        run.evaluate_model(EvalSpec([str(student)], data=DataSpec(str(empty), seq_len=32), new_tokens=2))
