"""The demo's code path end to end on a tiny random teacher and a few documents."""

import json

from rich.console import Console

from conftest import pydoc_texts
from destila.demo import Demo, DemoSettings, split_documents


def test_split_holds_out_every_fifth_document():
    train, held = split_documents([str(i) for i in range(12)], 5)
    assert held == ["4", "9"] and len(train) == 10


def test_demo_pipeline_end_to_end_and_resume(tiny_llama_dir, tmp_path):
    settings = DemoSettings(
        teacher=str(tiny_llama_dir), seq_len=32, train_tokens=32 * 48, eval_tokens=32 * 8, top_k=8,
        student_layers=2, batch_size=4, max_steps=6, minutes=30, new_tokens=4,
    )
    console = Console(record=True, width=120)
    state = Demo(tmp_path, settings, texts=pydoc_texts(12), console=console).run()
    assert list(state) == ["teacher", "cache", "student", "distill", "baseline", "evaluate"]
    assert state["distill"]["steps"] == state["baseline"]["steps"] == 6
    report = json.loads((tmp_path / "report.json").read_text())
    assert [r["model"] for r in report["results"]] == ["teacher", "distilled", "baseline"]
    teacher, distilled, baseline = report["results"]
    assert teacher["top1_agreement"] == 1.0
    for student in (distilled, baseline):
        assert student["parameters"] < teacher["parameters"] and student["kl_to_teacher"] > 0
    assert len(report["training"]["distilled (KL to teacher)"]) == 6
    markdown = (tmp_path / "report.md").read_text()
    for section in ("Held-out comparison", "Generated text", "Time per stage", "Cache", "Settings"):
        assert f"## {section}" in markdown
    for plot in ("training_curves.png", "metrics.png"):
        assert (tmp_path / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # A second run finds every stage done and only rewrites the report.
    console = Console(record=True, width=120)
    Demo(tmp_path, settings, texts=pydoc_texts(12), console=console).run()
    assert console.export_text().count("done before") == 6
