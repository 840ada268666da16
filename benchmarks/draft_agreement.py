"""What each draft of ``benchmarks/draft_models.py`` would get accepted, estimated without timing on more prompts.

The measurement (``draft_models.py measure``) times real decoding on 8 held-out prompts; its acceptance moves
with which 8. This estimate reads, for the first ``--prompts`` held-out prompts (default 48), the teacher's own
greedy answer once, then every draft teacher-forced on those answers, and averages over every answer position:

- ``greedy``: how often the draft's top token is the teacher's (what greedy speculative decoding keeps);
- ``sampling``: ``Σ_x min(p(x), q(x))`` with ``p`` the teacher's and ``q`` the draft's distribution at
  temperature 1 (the probability that speculative sampling keeps one proposal, exactly).

The draft proposes from its whole head here (the measurement's narrow head changes acceptance by about a
point). Naive equivalent for one draft and one answer::

    p = softmax(teacher(answer).logits); q = softmax(draft(answer).logits)   # at the answer's positions
    greedy = (q.argmax(-1) == answer_tokens).mean(); sampling = minimum(p, q).sum(-1).mean()

    python benchmarks/draft_agreement.py WORK --out benchmarks/results/draft_agreement.jsonl

``WORK`` is ``draft_models.py train``'s folder; one JSON line per draft, appended as it is read (a rerun
skips the drafts done). The teacher's answers are kept in ``WORK/held_answers.json``.

Any other drafts, a training run's checkpoints say, are read the same way on the first ``--prompts`` prompts of
a prompts file (a recipe's ``DRAFT/work/held_out.jsonl``), each line naming its draft and, from the folder's
``trainer_state.json``, the optimizer step it was saved at::

    python benchmarks/draft_agreement.py --held-out held48.jsonl --drafts RUN/checkpoint-500 RUN --out FILE
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script, only benchmarks/ itself is on the path
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.draft_models import _ORDER, TEACHER, _name, _runs  # noqa: E402 (after the path above)
from destila.io.json_lines import append_json_line, read_json_lines  # noqa: E402
from destila.io.markdown import table_lines  # noqa: E402


def held_answers(work: Path, teacher, tokenizer, prompts: int, new_tokens: int) -> list[dict]:
    """The teacher's greedy answers to the first ``prompts`` held-out prompts (:func:`teacher_answers`), read
    from ``WORK/held_answers.json`` when it holds these."""
    from destila.draft.prompts import pydoc_prompts
    from destila.generation.prompts import load_prompts
    from destila.io import write_atomic

    path = work / "held_answers.json"
    if path.is_file():
        saved = json.loads(path.read_text())
        if saved["prompts"] == prompts and saved["new_tokens"] == new_tokens:
            return saved["answers"]
    answers = teacher_answers(load_prompts(pydoc_prompts()[1][:prompts]), teacher, tokenizer, new_tokens)
    write_atomic(path, json.dumps({"prompts": prompts, "new_tokens": new_tokens, "answers": answers}))
    return answers


def teacher_answers(prompts: list, teacher, tokenizer, new_tokens: int) -> list[dict]:
    """The teacher's greedy answer to each prompt (at most ``new_tokens``): ``[{"ids", "start"}]`` (prompt and
    answer ids, and where the answer starts)."""
    import torch

    from destila.draft.measure import encode_prompts
    from destila.generation.sampling import stop_ids
    from destila.io.progress import progress_bar

    encoded, _ = encode_prompts(tokenizer, prompts)
    stop = stop_ids(teacher, tokenizer)
    answers = []
    with torch.no_grad(), progress_bar(total=len(encoded), unit="answer", desc="held-out answers") as bar:
        for ids in encoded:
            out = teacher.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                   max_new_tokens=new_tokens, eos_token_id=stop, pad_token_id=stop[0])
            answers.append({"ids": out[0].tolist(), "start": ids.shape[1]})
            bar.update(1)
    return answers


def answer_probabilities(model, answers: list[dict]) -> list:
    """Per answer, the model's next-token distribution at each answer position: ``[answer_len, V]`` float32."""
    import torch

    with torch.no_grad():
        return [torch.softmax(model(torch.tensor([a["ids"]])).logits[0, a["start"] - 1:-1].float(), -1)
                for a in answers]


def agreement(teacher_probs: list, draft_probs: list, answers: list[dict]) -> dict:
    """``greedy`` and ``sampling`` (see the module docstring) over every answer position, and the positions."""
    import torch

    tokens = [torch.tensor(a["ids"][a["start"]:]) for a in answers]
    greedy = torch.cat([q.argmax(-1) == t for q, t in zip(draft_probs, tokens)]).double()
    kept = torch.cat([torch.minimum(p, q).sum(-1) for p, q in zip(teacher_probs, draft_probs)]).double()
    return {"greedy": round(greedy.mean().item(), 4), "sampling": round(kept.mean().item(), 4),
            "positions": int(greedy.numel())}


def run(work: Path, out: Path, sizes: list[int], seeds: list[int], prompts: int, new_tokens: int,
        teacher_name: str = TEACHER) -> None:
    """Every trained draft (and each cut) of ``work`` against the teacher's held-out answers, one line each."""
    from destila.draft.loading import load_teacher
    from destila.draft.spec import DraftEvalSpec
    from destila.models import load_causal_lm

    done = {(r["row"], r["layers"], r["seed"]) for r in read_json_lines(out)} if out.exists() else set()
    teacher, tokenizer = load_teacher(DraftEvalSpec(teacher_name, None, ["-"], ways=("teacher",)))
    answers = held_answers(work, teacher, tokenizer, prompts, new_tokens)
    teacher_probs = answer_probabilities(teacher, answers)
    todo = [("cut", size, 0, work / f"init-{size}") for size in sizes]
    todo += [(row, size, seed, work / "train" / _name(row, size, seed)) for row, size, seed in _runs(sizes, seeds)]
    for row, size, seed, folder in todo:
        if (row, size, seed) in done:
            continue
        if not (folder / "config.json").is_file():
            print(f"{folder.name}: not trained yet (run draft_models.py train first); not read")
            continue
        draft = load_causal_lm(str(folder))
        record = {"row": row, "layers": size, "seed": seed, "prompts": len(answers),
                  **agreement(teacher_probs, answer_probabilities(draft, answers), answers)}
        append_json_line(out, record)
        print(json.dumps(record))


def run_drafts(drafts: list[Path], held_out: Path, out: Path, prompts: int, new_tokens: int,
               teacher_name: str = TEACHER) -> None:
    """Each folder of ``drafts`` against the teacher's answers to the first ``prompts`` prompts of ``held_out``,
    one line each (a rerun skips the folders done); ``step`` is the optimizer step of the folder's
    ``trainer_state.json``, or None without one."""
    from destila.draft.loading import load_teacher
    from destila.draft.spec import DraftEvalSpec
    from destila.generation.prompts import load_prompts
    from destila.models import check_source, load_causal_lm

    for folder in drafts:  # a typo refused before the teacher answers anything
        check_source(str(folder))
    done = {r["draft"] for r in read_json_lines(out)} if out.exists() else set()
    todo = [folder for folder in drafts if str(folder) not in done]
    if not todo:  # the teacher's answers are not written again for nothing
        return
    teacher, tokenizer = load_teacher(DraftEvalSpec(teacher_name, None, ["-"], ways=("teacher",)))
    answers = teacher_answers(load_prompts(held_out)[:prompts], teacher, tokenizer, new_tokens)
    teacher_probs = answer_probabilities(teacher, answers)
    for folder in todo:
        state = folder / "trainer_state.json"
        step = json.loads(state.read_text())["global_step"] if state.is_file() else None
        record = {"draft": str(folder), "step": step, "prompts": len(answers),
                  **agreement(teacher_probs, answer_probabilities(load_causal_lm(str(folder)), answers), answers)}
        append_json_line(out, record)
        print(json.dumps(record))


def drafts_table(records: list[dict]) -> str:
    """The lines of :func:`run_drafts` by step: one column per run (a checkpoint's run is its parent folder), each
    cell ``greedy / sampling``; ``–`` where a run has no draft at that step."""
    runs: dict = {}
    for r in records:
        path = Path(r["draft"])
        run = path.parent.name if path.name.startswith("checkpoint-") else path.name
        runs.setdefault(run, {})[r["step"]] = f"{r['greedy']:.3f} / {r['sampling']:.3f}"
    steps = sorted({step for cells in runs.values() for step in cells}, key=lambda step: (step is None, step or 0))
    return "\n".join(table_lines(["step", *runs], [["–" if step is None else f"{step:,}",
                                                     *(cells.get(step, "–") for cells in runs.values())]
                                                    for step in steps]))


def table(records: list[dict]) -> str:
    """Mean over seeds per (layers, row) of the two estimates; ± half the seeds' spread."""
    groups: dict = {}
    for r in records:
        groups.setdefault((r["layers"], r["row"]), []).append(r)

    def cell(values):
        mean = statistics.mean(values)
        return f"{mean:.3f}" + (f" ± {(max(values) - min(values)) / 2:.3f}" if len(values) > 1 else "")

    lines = [[str(layers), row, str(len(group)), cell([g["greedy"] for g in group]),
              cell([g["sampling"] for g in group])]
             for (layers, row), group in sorted(groups.items(), key=lambda kv: (kv[0][0], _ORDER.index(kv[0][1])))]
    return "\n".join(table_lines(["layers", "draft", "seeds", "greedy: top-1 agreement",
                                  "sampling: Σ min(p, q)"], lines))


BENCHMARK_OUT = Path("benchmarks/results/draft_agreement.jsonl")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("work", type=Path, nargs="?", help="draft_models.py train's folder (not with --table)")
    parser.add_argument("--drafts", type=Path, nargs="+", help="any draft folders instead of WORK's (with "
                        "--held-out)")
    parser.add_argument("--held-out", type=Path, help="the prompts file --drafts are read on")
    parser.add_argument("--out", type=Path, help=f"the JSON lines to append to (default {BENCHMARK_OUT} for WORK's "
                        "drafts; expected with --drafts, whose lines that table does not read)")
    parser.add_argument("--sizes", default="2,4")
    parser.add_argument("--seeds", default="0,1")
    parser.add_argument("--prompts", type=int, default=48, help="held-out prompts the teacher answers")
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--teacher", default=TEACHER)
    parser.add_argument("--table", action="store_true", help="print the table of --out and stop")
    return parser


def main(argv=None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.table:
        records = read_json_lines(args.out or BENCHMARK_OUT)
        print(drafts_table(records) if records and "draft" in records[0] else table(records))
        return
    if args.drafts:
        if args.work is not None or args.held_out is None or args.out is None:
            parser.error("--drafts: expected --held-out FILE (the prompts to answer), --out FILE and no WORK folder")
        run_drafts(args.drafts, args.held_out, args.out, args.prompts, args.new_tokens, args.teacher)
        return
    if args.work is None:
        parser.error("expected WORK, the folder `draft_models.py train` wrote")
    run(args.work, args.out or BENCHMARK_OUT, [int(x) for x in args.sizes.split(",")],
        [int(x) for x in args.seeds.split(",")], args.prompts, args.new_tokens, args.teacher)


if __name__ == "__main__":
    main()
