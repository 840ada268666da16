"""How far the next-word task's standard error understates its spread when questions share a sentence.

The harness's standard error treats the questions as independent; the
``pydoc_next_word`` questions of one sentence share their context. This
script scores each model question by question (the harness's own samples)
and compares the harness's error with the one computed over sentences
(cluster-robust: the squared sum of each sentence's deviations from the
mean, summed over sentences, over ``n²``).

    python benchmarks/task_stderr.py smollm2 OUT/student     # one JSON line per model

One torch thread; models load as everywhere in destila.
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict

from destila.io.json_lines import read_json_lines

TASK = "pydoc_next_word"


def by_sentence(correct: dict[int, float], rows: list[dict]) -> dict:
    """The mean, the binomial standard error and the one over sentences of 0/1 scores ``{question: score}``."""
    n = len(correct)
    mean = sum(correct.values()) / n
    deviations = defaultdict(float)
    for index, row in enumerate(rows):
        deviations[(row["document"], row["sentence"])] += correct[index] - mean
    return {"acc": mean, "stderr_binomial": math.sqrt(mean * (1 - mean) / (n - 1)),
            "stderr_by_sentence": math.sqrt(sum(d * d for d in deviations.values())) / n,
            "questions": n, "sentences": len(deviations)}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+")
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)

    import lm_eval
    import torch
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager

    from destila.eval.tasks import BUILT_IN_TASKS
    from destila.models import load_causal_lm, load_tokenizer

    torch.set_num_threads(1)
    task = BUILT_IN_TASKS[TASK]()
    rows = read_json_lines(task.with_suffix(".jsonl"))
    manager = TaskManager(include_defaults=False, include_path=str(task.parent))
    for model in args.models:
        wrapped = HFLM(pretrained=load_causal_lm(model), tokenizer=load_tokenizer(model), batch_size=16)
        out = lm_eval.simple_evaluate(model=wrapped, tasks=[str(task)], batch_size=16, log_samples=True,
                                      task_manager=manager)
        correct = {sample["doc_id"]: sample["acc"] for sample in out["samples"][TASK]}
        print(json.dumps({"model": model, "stderr_harness": out["results"][TASK]["acc_stderr,none"],
                          **by_sentence(correct, rows)}))


if __name__ == "__main__":
    main()
