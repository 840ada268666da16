"""What the draft tests share: a command run in this process, and a prompt file of pydoc lines."""

import pytest
from conftest import pydoc_texts

from destila.cli.main import main


def run(argv: list[str]) -> int:
    """``destila ARGV`` in this process; its exit code."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    return stop.value.code or 0


def prompt_file(folder, topic: int, count: int, width: int):
    """``folder/prompts.txt``: the first ``count`` long lines of pydoc topic ``topic``, cut to ``width``."""
    lines = [line.strip()[:width] for line in pydoc_texts(topic + 1)[topic].splitlines() if len(line.strip()) > 30]
    assert len(lines) >= count
    path = folder / "prompts.txt"
    path.write_text("\n".join(lines[:count]) + "\n")
    return path
