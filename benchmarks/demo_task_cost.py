"""What the demo's task accuracy costs, against the teacher pass its time budget is scaled by.

The demo sizes its evaluation reserve from the teacher's measured speed on
its held-out pass (docs/demo.md, "The time budget"). This script measures,
in one process with one torch thread, the CPU seconds of that held-out pass
and of the demo's task on the teacher and on the demo's student as
``student init`` cuts it (before training): CPU seconds move far less with
the load of a shared machine than the wall clock does, and their ratio is
what the reserve needs.

    python benchmarks/demo_task_cost.py OUT            # OUT: a scratch folder (cache, student)

Prints one JSON object: the seconds and the accuracy of each part and the
load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="scratch folder")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    import torch

    torch.set_num_threads(1)

    from destila.cache import BuildSpec, build_cache
    from destila.data import pydoc_texts
    from destila.demo.pipeline import TASK_BATCH_SIZE, split_documents
    from destila.demo.settings import DemoSettings
    from destila.eval import task_scores
    from destila.models import embedded_teacher_dir, load_tokenizer
    from destila.student import init_student
    from destila.student.calibration import from_texts
    from destila.targets.spec import TargetSpec

    settings = DemoSettings()
    teacher = str(embedded_teacher_dir())
    train, held = split_documents(pydoc_texts(), settings.holdout_every)
    record = {"load_before": os.getloadavg(), "task": settings.task, "batch_size": TASK_BATCH_SIZE}
    cpu, wall = time.process_time(), time.perf_counter()
    report = build_cache(BuildSpec.from_options(teacher, held, args.out / "cache-heldout", max_tokens=settings.eval_tokens,
                                   seq_len=settings.seq_len, targets=TargetSpec(top_k=settings.top_k),
                                   batch_size=settings.cache_batch_size))
    record["heldout_pass"] = {"tokens": report.tokens, "cpu_seconds": time.process_time() - cpu,
                              "seconds": time.perf_counter() - wall}
    student = args.out / "student"
    if not (student / "config.json").exists():
        calibration = from_texts(train, load_tokenizer(teacher), settings.calibration_tokens,
                                 source="the demo's training documents")
        init_student(teacher, student, layers=settings.student_layers, calibration=calibration,
                     **settings.student_width)
    for name, model in (("teacher", teacher), ("student", str(student))):
        cpu, wall = time.process_time(), time.perf_counter()
        (score,) = task_scores(settings.task, [model], settings.task_questions, batch_size=TASK_BATCH_SIZE,
                               log=lambda _: None)
        record[f"task_{name}"] = {"acc": score["acc"], "stderr": score["acc_stderr"], "questions": score["questions"],
                                  "cpu_seconds": time.process_time() - cpu, "seconds": time.perf_counter() - wall}
    record["load_after"] = os.getloadavg()
    print(json.dumps(record))


if __name__ == "__main__":
    main()
