"""Each refusal names the thing that is wrong (the value, the lock, the folder, the flag), in one line."""

from __future__ import annotations

import subprocess
import sys

import pytest
from fault_helpers import ENV, build_command, destila, error_line, small_cache, student, train_command  # noqa: F401


@pytest.mark.parametrize("value, problem", [
    ('!!python/object/apply:os.system ["echo ran"]', "Python tags are never run"),
    ("[unclosed", "expected ',' or ']'"),
])
def test_a_trl_flag_yaml_cannot_read_is_one_line(tmp_path, value, problem):
    """TRL's flags are read as YAML reads a config value; a value YAML refuses was a traceback (nothing ran)."""
    result = destila("train", "--model_name_or_path", value, "--cache", tmp_path / "cache", "-o", tmp_path / "out")
    line = error_line(result, "train", 2, "--model_name_or_path: ", f"{value!r} is not a plain value", problem)
    assert "ran" not in result.stdout and not (tmp_path / "out").exists(), line


@pytest.mark.parametrize("command", ["train", "cache"])
def test_a_lock_planted_as_a_link_is_named_as_one(small_cache, student, tiny_llama_dir, tmp_path,  # noqa: F811
                                                   command):
    """A `.lock` that is a symbolic link was reported as a folder that cannot be written (or as a bare OS error)."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".lock").symlink_to(tmp_path / "elsewhere" / "lock")
    if command == "train":
        result = destila(*train_command(student, small_cache, out, "--max_steps", "1"))
    else:
        result = destila(*build_command(tiny_llama_dir, "pydoc", out))
    error_line(result, command, 2, f"the lock file {out / '.lock'} is a symbolic link (to {tmp_path / 'elsewhere'}",
               "remove the link")
    assert not (tmp_path / "elsewhere").exists() and [p.name for p in out.iterdir()] == [".lock"]


def test_an_export_into_the_current_folder_names_it(small_cache, tmp_path):  # noqa: F811
    """`cache export CACHE .` printed `PosixPath('.') has an empty name`."""
    here = tmp_path / "here"
    here.mkdir()
    result = subprocess.run([sys.executable, "-m", "destila", "cache", "export", str(small_cache), ".",
                             "--no-progress"], cwd=here, env=ENV, capture_output=True, text=True, timeout=300)
    error_line(result, "cache", 2, f"export: OUT . is the current folder ({here})", "such as ./export")
    assert "PosixPath" not in result.stderr and list(here.iterdir()) == [] and list(tmp_path.iterdir()) == [here]
    (here / "inner").mkdir()
    up = subprocess.run([sys.executable, "-m", "destila", "cache", "export", str(small_cache), "..", "--no-progress"],
                        cwd=here / "inner", env=ENV, capture_output=True, text=True, timeout=300)
    error_line(up, "cache", 2, f"export: {here} already exists and is not an empty folder")


def test_an_export_card_whose_front_matter_is_broken_is_named_as_such(small_cache, student, tmp_path):  # noqa: F811
    """The card's broken YAML was reported as `its dataset_info.description is not the export record
    (ParserError)`."""
    from export_damage import broken_card

    export = tmp_path / "export"
    assert destila("cache", "export", small_cache, export, "--no-progress").returncode == 0
    broken_card(export, tmp_path)
    result = destila(*train_command(student, export, tmp_path / "out", "--max_steps", "1"))
    error_line(result, "train", 2, "README.md: its YAML front matter does not parse, line 3 (expected ',' or ']'")
    assert not (tmp_path / "out").exists()
