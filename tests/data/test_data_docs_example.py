"""The Python example of docs/data.md, run as written with tiny random models in place of its folders."""

import re
from pathlib import Path

from conftest import save_tiny_model

DOC = Path(__file__).resolve().parents[2] / "docs" / "data.md"
FOLDERS = 'TEACHER, STUDENT, OUT = "teacher/", "student/", "distilled/"'


def python_example() -> str:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    assert len(blocks) == 1, "docs/data.md should hold exactly one Python example"
    assert FOLDERS in blocks[0]
    return blocks[0]


def test_docs_trl_example_runs(tmp_path, tiny_chat_llama_dir, tiny_chat_tokenizer):
    code = python_example()
    assert len(code.strip().splitlines()) <= 30
    student = tmp_path / "student"
    save_tiny_model(student, tiny_chat_tokenizer, seed=5, layers=2)
    out = tmp_path / "distilled"
    code = code.replace(FOLDERS, f"TEACHER, STUDENT, OUT = {str(tiny_chat_llama_dir)!r}, {str(student)!r}, {str(out)!r}")
    namespace = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    trainer = namespace["trainer"]
    assert trainer.state.global_step == 2
    assert (out / "model.safetensors").is_file()
    # The dataset was tokenised with the chat template and trains only the assistant turns.
    item = trainer.train_dataset[0]
    text = tiny_chat_tokenizer.decode(item["input_ids"][1:][item["loss_mask"][:-1]])
    assert text == "The number of items in a container.<|im_end|>"
