"""A checkpoint counts as complete only while every file its stamp listed is still there, whole.

The Trainer writes checkpoint N, deletes the older ones (``save_total_limit``)
and only then is checkpoint N stamped; a kill during that deletion leaves an
older checkpoint stamped but part-deleted, which must not be resumed from.
"""

from destila.training.output_dir import checkpoint_files, newest_checkpoint, write_run_record


def make_checkpoint(out, step, run_id="run-a"):
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 64)
    (folder / "trainer_state.json").write_text("{}")
    write_run_record(folder, run_id, step=step, files=checkpoint_files(folder))
    return folder


def test_a_part_deleted_checkpoint_is_not_complete(tmp_path):
    older = make_checkpoint(tmp_path, 2)
    assert newest_checkpoint(tmp_path, "run-a") == str(older)
    (older / "model.safetensors").unlink()  # the rotation was killed half-way through this folder
    assert newest_checkpoint(tmp_path, "run-a") is None
    newer = make_checkpoint(tmp_path, 4)
    assert newest_checkpoint(tmp_path, "run-a") == str(newer)
    (newer / "model.safetensors").write_bytes(b"w" * 10)  # cut short
    assert newest_checkpoint(tmp_path, "run-a") is None


def test_a_stamp_without_a_file_list_is_trusted_as_before(tmp_path):
    folder = tmp_path / "checkpoint-3"
    folder.mkdir()
    write_run_record(folder, "run-a", step=3)
    assert newest_checkpoint(tmp_path, "run-a") == str(folder)
