"""The run record (``destila_run.json``) names the data as it was read, as the model card does: a chat file
detected as messages records ``messages_field messages`` (and no ``text_field``), ``loss_on assistant`` and ``packing bfd``."""

import json

import pytest
from conftest import conversations

from destila.cli.main import main as cli


def test_an_auto_detected_chat_file_is_recorded_as_the_card_describes_it(tiny_chat_llama_dir, tmp_path):
    data = tmp_path / "chat.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in conversations()))
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(tiny_chat_llama_dir), "--teacher", str(tiny_chat_llama_dir), "--data", str(data),
             "-o", str(out), "--seq_len", "64", "--use_cpu", "--max_steps", "1", "--save_steps", "1"])
    assert exit_.value.code in (0, None)
    recorded = json.loads((out / "destila_run.json").read_text())["objective"]["targets"]["data"]
    assert (recorded["messages_field"], recorded["loss_on"], recorded["packing"]) == ("messages", "assistant", "bfd")
    assert "text_field" not in recorded  # a field the messages format does not read
    card = (out / "README.md").read_text()
    assert "(messages, loss on assistant, bfd packing" in card
    # --resume alone takes the recorded data fields back, and reads the file the same way.
    with pytest.raises(SystemExit) as exit_:
        cli(["train", str(tiny_chat_llama_dir), "-o", str(out), "--resume", "--use_cpu", "--max_steps", "2"])
    assert exit_.value.code in (0, None)
    resumed = json.loads((out / "destila_run.json").read_text())["objective"]["targets"]["data"]
    assert resumed == recorded
