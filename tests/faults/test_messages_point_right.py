"""Each refusal names the thing that is wrong (the value, the lock, the folder, the flag), in one line."""

from __future__ import annotations

import pytest
from fault_helpers import destila, error_line


@pytest.mark.parametrize("value, problem", [
    ('!!python/object/apply:os.system ["echo ran"]', "Python tags are never run"),
    ("[unclosed", "expected ',' or ']'"),
])
def test_a_trl_flag_yaml_cannot_read_is_one_line(tmp_path, value, problem):
    """TRL's flags are read as YAML reads a config value; a value YAML refuses was a traceback (nothing ran)."""
    result = destila("train", "--model_name_or_path", value, "--cache", tmp_path / "cache", "-o", tmp_path / "out")
    line = error_line(result, "train", 2, "--model_name_or_path: ", f"{value!r} is not a plain value", problem)
    assert "ran" not in result.stdout and not (tmp_path / "out").exists(), line
