"""Distilled drafts for speculative decoding: which training makes the embedded teacher write fastest.

Teacher: the embedded SmolLM2-135M-Instruct, greedy decoding, float32 on the CPU. Prompts:
``destila.draft.prompts.pydoc_prompts`` (questions on sentences of Python's documentation; held-out
topics never trained on). Drafts: cut from the teacher with ``--sizes`` layers (evenly spaced), then

- ``cut``: untrained;
- ``ce-pydoc``: cross-entropy on Python's documentation (the demo's text), no teacher;
- ``kd-pydoc``: forward KL to the teacher's cached top-100 on that same text (offline KD);
- ``ce-answers``: cross-entropy on the teacher's own greedy answers to the training prompts
  (sequence-level KD);
- ``kd-answers``: forward KL to the teacher's cached top-100 on those answers (KD on teacher-written text);
- ``kd-answers-tvd``, ``kd-answers-rkl``: the same with total variation / reverse KL (largest size only);
- ``ce-answers-4x``, ``kd-answers-4x``: the answers rows on 4× the tokens (smallest size, first seed only);
- ``ce-answers-16x``, ``kd-answers-16x``: on 16× the tokens (smallest size, every seed), about 14 passes over
  the answers: the rows above stop after 50 optimizer steps, far from trained.

Every trained row trains on the same number of trained tokens (``--tokens``; answers train on their
answer tokens only), batch 4 × 256, learning rate 5e-4 after 5 warm-up steps, with each ``--seeds``.
Each draft is then measured by ``destila eval``'s measurement (:func:`destila.draft.measure.measure_draft`)
in one process against one loaded teacher: per held-out prompt the teacher alone and the teacher with the
draft in turn (the draft proposes from the teacher's 8,192 most frequent answer tokens, ``--draft-vocab``,
one token before every teacher forward, with timed CPU products), and prompt lookup with 1 and with 10
proposals. The best KD draft is measured again with its whole head, with 2 proposals per forward, with
transformers' adaptive proposals and with torch's own products; prompt lookup and the 16× rows again with
speculative sampling at temperature 1 (a proposal is kept with probability min(1, p/q), so the draft's whole
distribution counts, not only its top token). One JSON line per measurement is appended as soon as it is
taken; a rerun skips what is done (trainings resume from their checkpoints).

    python benchmarks/draft_models.py train WORK            # answers, caches, cuts, every training
    python benchmarks/draft_models.py measure WORK --out benchmarks/results/draft_models.jsonl
    python benchmarks/draft_models.py table benchmarks/results/draft_models.jsonl
    python benchmarks/draft_models.py plot benchmarks/results/draft_models.jsonl

``benchmarks/draft_agreement.py`` estimates the same drafts' acceptance on more prompts, without timing.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from destila.io.json_lines import append_json_line, read_json_lines
from destila.io.markdown import table_lines

TEACHER = "smollm2"
_CE = {"soft_weight": 0.0, "hard_weight": 1.0}
_KD = {"soft_weight": 1.0, "hard_weight": 0.0, "divergence": "forward_kl"}
ROWS = {  # name: (training data, loss weights and divergence)
    "ce-pydoc": ("pydoc", _CE),
    "kd-pydoc": ("pydoc", _KD),
    "ce-answers": ("answers", _CE),
    "kd-answers": ("answers", _KD),
}
DIVERGENCE_ROWS = {
    "kd-answers-tvd": ("answers", {"soft_weight": 1.0, "hard_weight": 0.0, "divergence": "tvd"}),
    "kd-answers-rkl": ("answers", {"soft_weight": 1.0, "hard_weight": 0.0, "divergence": "reverse_kl"}),
}
LONG_ROWS = {  # the answers rows again on more tokens (many passes over the answers), smallest size only
    # name: (training data, loss, multiple of --tokens, trained with every seed or the first only)
    "ce-answers-4x": ("answers", _CE, 4, False),
    "kd-answers-4x": ("answers", _KD, 4, False),
    "ce-answers-16x": ("answers", _CE, 16, True),
    "kd-answers-16x": ("answers", _KD, 16, True),
}
SAMPLED_ROWS = ("ce-answers-16x", "kd-answers-16x")  # measured with speculative sampling too
SAMPLING_TEMPERATURE = 1.0
SEQ_LEN, BATCH, TOP_K, LEARNING_RATE = 256, 4, 100, 5e-4


def _recipe(work: Path, teacher: str, tokens: int, train_prompts: int, answer_tokens: int):
    from destila.draft.recipe import DraftRecipe, DraftSettings

    settings = DraftSettings(layers=1, tokens=tokens, seq_len=SEQ_LEN, top_k=TOP_K, batch_size=BATCH,
                             learning_rate=LEARNING_RATE, generate_batch_size=48, train_prompts=train_prompts,
                             answer_tokens=answer_tokens)
    return DraftRecipe(teacher, work / "recipe", settings)


def _runs(sizes: list[int], seeds: list[int]) -> list[tuple[str, int, int]]:
    runs = [(row, size, seed) for seed in seeds for size in sizes for row in ROWS]
    runs += [(row, max(sizes), seeds[0]) for row in DIVERGENCE_ROWS]
    runs += [(row, min(sizes), seed) for seed in seeds for row, (*_, every_seed) in LONG_ROWS.items()
             if every_seed or seed == seeds[0]]
    return runs


def train(work: Path, sizes: list[int], seeds: list[int], tokens: int, teacher: str = TEACHER,
          train_prompts: int = 400, answer_tokens: int = 96) -> None:
    """The teacher's answers and both caches, the cut drafts, then every training not done yet."""
    from destila.cache import build_cache, inspect_cache
    from destila.data import DataSpec
    from destila.demo.stages import train_from_cache

    recipe = _recipe(work, teacher, tokens, train_prompts, answer_tokens)
    log = recipe.log
    train_prompts, _ = recipe.prompts()
    answers = log.run("answers", "the teacher's answers", lambda: recipe.answers(train_prompts))
    caches = {"answers": log.run("cache", "cache of the answers", lambda: recipe.cache(answers))}

    def pydoc_cache() -> dict:
        folder = work / "pydoc-cache"
        build_cache(teacher, DataSpec("pydoc", seq_len=SEQ_LEN, max_tokens=tokens), folder, top_k=TOP_K)
        summary = inspect_cache(folder)
        return {"path": str(folder), "sequences": summary["sequences"],
                "trained_positions": summary["trained_positions"]}

    caches["pydoc"] = log.run("pydoc-cache", "cache of Python's documentation", pydoc_cache)
    log.run("ranking", "the teacher's tokens by frequency", lambda: recipe.ranking(answers["path"]))
    for size in sizes:
        log.run(f"init-{size}", f"{size} layers cut", lambda: _init(work, teacher, size))
    for row, size, seed in _runs(sizes, seeds):
        data, loss, multiple = LONG_ROWS[row][:3] if row in LONG_ROWS else (*{**ROWS, **DIVERGENCE_ROWS}[row], 1)
        cache = caches[data]
        per_sequence = cache["trained_positions"] / cache["sequences"]
        steps = max(1, round(tokens * multiple / (BATCH * per_sequence)))

        def run(cache=cache, loss=loss, steps=steps, per_sequence=per_sequence, name=_name(row, size, seed)):
            result = train_from_cache(str(work / f"init-{size}"), work / "train" / name, cache["path"],
                                      max_steps=steps, batch_size=BATCH, learning_rate=LEARNING_RATE, seed=seed,
                                      **loss)
            _copy_ranking(work, Path(result["path"]))
            return {**result, "trained_tokens": round(result["steps"] * BATCH * per_sequence)}

        log.run(f"train-{_name(row, size, seed)}", f"train {row}, {size} layers, seed {seed}", run)


def _name(row: str, size: int, seed: int) -> str:
    return f"{row}-{size}L-s{seed}"


def _init(work: Path, teacher: str, size: int) -> dict:
    from destila.student import init_student
    from destila.student.spec import StudentInitSpec

    path = work / f"init-{size}"
    if not (path / "config.json").exists():
        init_student(StudentInitSpec(teacher, path, layers=size))
    _copy_ranking(work, path)
    return {"path": str(path)}


def _copy_ranking(work: Path, folder: Path) -> None:
    from destila.draft.head import VOCAB_FILE
    from destila.io import write_atomic

    write_atomic(folder / VOCAB_FILE, (work / "recipe" / "work" / VOCAB_FILE).read_bytes())


def measure(work: Path, out: Path, sizes: list[int], seeds: list[int], prompts: int, new_tokens: int,
            draft_vocab: int, teacher_name: str = TEACHER) -> None:
    """Every draft against the teacher alone, one JSON line each; prompt lookup once; full head for the best.
    First the step costs (``OUT_costs.json``), which say what acceptance a draft needs here."""
    import os

    import torch

    from destila.draft.loading import load_teacher
    from destila.draft.prompts import pydoc_prompts
    from destila.generation.small_matmul import TimedLinear
    from destila.draft.spec import DraftEvalSpec

    held = pydoc_prompts()[1][:prompts]
    costs = out.with_name(out.stem + "_costs.json")
    if not costs.exists():
        costs.write_text(json.dumps({**step_costs(work, teacher_name, sizes, draft_vocab),
                                     "load_average": os.getloadavg()[0]}, indent=2))
    done = {_key(r) for r in read_json_lines(out)} if out.exists() else set()
    first = DraftEvalSpec(teacher_name, None, held, max_new_tokens=new_tokens, ways=("teacher", "prompt_lookup"))
    teacher = load_teacher(first)
    load = {"threads": torch.get_num_threads(), "load_average_start": os.getloadavg()[0]}
    # One TimedLinear for every row: the products' ways are chosen once, so the baseline is taken alike throughout.
    context = {"out": out, "done": done, "teacher": teacher, "linear": TimedLinear(), "teacher_name": teacher_name,
               "held": held, "new_tokens": new_tokens, "load": load}
    one = _default_proposals()
    todo = [("prompt_lookup", 0, 0, None, None, {"prompt_lookup_tokens": k}) for k in (one, 10)]
    todo += [("cut", size, 0, draft_vocab, work / f"init-{size}", {}) for size in sizes]
    todo += [(row, size, seed, draft_vocab, work / "train" / _name(row, size, seed), {})
             for row, size, seed in _runs(sizes, seeds)]
    for row, size, seed, vocab, folder, options in todo:
        _measure_one(context, row, size, seed, vocab, folder, options)
    best = _best(out, "kd-answers")
    if best is not None:  # the best draft again: whole head, 2 and adaptive proposals, torch's products
        folder = work / "train" / _name(best["row"], best["layers"], best["seed"])
        for vocab, options in ((None, {}), (draft_vocab, {"draft_tokens": 2}), (draft_vocab, {"draft_tokens": 0}),
                               (draft_vocab, {"matmul": "torch"})):
            _measure_one(context, best["row"], best["layers"], best["seed"], vocab, folder, options)
    # Sampling (speculative sampling at temperature 1): a proposal is kept with probability min(1, p/q), so the
    # whole distribution counts, not only its top token; prompt lookup and the longest-trained answers rows.
    sampled = {"temperature": SAMPLING_TEMPERATURE}
    _measure_one(context, "prompt_lookup", 0, 0, None, None, {**sampled, "prompt_lookup_tokens": one})
    for row, size, seed in _runs(sizes, seeds):
        if row in SAMPLED_ROWS:
            _measure_one(context, row, size, seed, draft_vocab, work / "train" / _name(row, size, seed), sampled)


def _measure_one(context: dict, row: str, size: int, seed: int, vocab, folder: Path | None, options: dict) -> None:
    """One row measured and appended, unless ``context["done"]`` has it (``context``: what every row shares)."""
    from destila.draft.measure import measure_draft
    from destila.draft.spec import DraftEvalSpec

    ways = ("teacher", "prompt_lookup") if folder is None else ("teacher", "draft")
    spec = DraftEvalSpec(context["teacher_name"], None if folder is None else str(folder), context["held"],
                         max_new_tokens=context["new_tokens"], draft_vocab=vocab, ways=ways, **options)
    if (row, size, seed, vocab, _proposals(row, spec.prompt_lookup_tokens, spec.draft_tokens),
            spec.matmul, spec.temperature) in context["done"]:
        return
    if folder is not None and not (folder / "config.json").is_file():
        print(f"{folder.name}: not trained yet (run `train` first); not measured")
        return
    report = measure_draft(spec, teacher=context["teacher"], linear=context["linear"])
    _append(context["out"], row, size, seed, vocab, report, context["load"])


def _default_proposals() -> int:
    from destila.draft.spec import DraftEvalSpec

    return DraftEvalSpec.__dataclass_fields__["draft_tokens"].default


def _proposals(row: str, prompt_lookup_tokens: int, draft_tokens: int) -> int:
    """Tokens proposed per teacher forward in ``row``: prompt lookup's, or the draft's."""
    return prompt_lookup_tokens if row == "prompt_lookup" else draft_tokens


def _key(record: dict) -> tuple:
    return (record["row"], record["layers"], record["seed"], record["draft_vocab"], record["proposals"],
            record["matmul"], _temperature(record))


def _temperature(record: dict) -> float:
    """A record's sampling temperature; 0 (greedy) for records written before sampled rows were measured."""
    return record.get("temperature") or 0.0


def step_costs(work: Path, teacher_name: str, sizes: list[int], draft_vocab: int) -> dict:
    """What one step costs here: the teacher's cached forward of 1, 2, 4, 8 and 16 new tokens (plain decoding
    pays the first per token; verifying k proposals pays k + 1), and each cut draft's one-token step with its
    whole head and with the narrow one; medians of 5 rounds, every model in turn."""
    import torch

    from destila.draft.head import narrow_head, read_ranking
    from destila.draft.measure import forward_seconds
    from destila.generation.small_matmul import TimedLinear, small_matmul
    from destila.models import load_causal_lm, load_tokenizer

    teacher = load_causal_lm(teacher_name)
    ids = load_tokenizer(teacher_name)(_CONTEXT, return_tensors="pt")["input_ids"]
    drafts = {}
    for size in sizes:
        whole = load_causal_lm(str(work / f"init-{size}"))
        narrow = load_causal_lm(str(work / f"init-{size}"))
        narrow_head(narrow, read_ranking(work / f"init-{size}"), draft_vocab)
        drafts[f"{size} layers, whole head"], drafts[f"{size} layers, {draft_vocab:,} rows"] = whole, narrow
    widths = (1, 2, 4, 8, 16)
    times = {**{f"teacher, {w} new": [] for w in widths}, **{name: [] for name in drafts},
             **{f"teacher, torch products, {w} new": [] for w in widths}}
    timed = TimedLinear()  # the products the measurements decode with, chosen once
    for _ in range(5):
        with small_matmul(teacher, *drafts.values(), linear=timed):
            for w in widths:
                times[f"teacher, {w} new"].append(forward_seconds(teacher, ids, repeats=3, width=w))
            for name, model in drafts.items():
                times[name].append(forward_seconds(model, ids, repeats=3))
        with small_matmul(teacher, way="torch"):  # what they cost with torch's own products
            for w in widths:
                times[f"teacher, torch products, {w} new"].append(forward_seconds(teacher, ids, repeats=3, width=w))
    return {"context_tokens": int(ids.shape[1]), "threads": torch.get_num_threads(),
            "ms": {name: round(statistics.median(values) * 1000, 3) for name, values in times.items()}}


_CONTEXT = ("Explain in simple words: \"The for statement is used to iterate over the elements of a sequence.\" "
            "The for statement runs its body once for every item, in order. ") * 2


def _append(out: Path, row: str, size: int, seed: int, vocab, report: dict, load: dict) -> None:
    import os

    ways = {w["way"]: w for w in report["ways"]}
    other = ways.get("draft") or ways.get("prompt_lookup")
    settings = report["settings"]
    proposals = _proposals(row, settings["prompt_lookup_tokens"], settings["draft_tokens"])
    record = {"row": row, "layers": size, "seed": seed, "draft_vocab": vocab, "proposals": proposals,
              "matmul": settings["matmul"], "temperature": settings["temperature"],
              "teacher_tokens_per_second": ways["teacher"]["tokens_per_second"],
              "tokens_per_second": other["tokens_per_second"], "speedup": other["speedup"],
              "acceptance": other["acceptance"], "tokens_per_forward": other["tokens_per_forward"],
              "identical": other.get("identical"), "prompts": report["settings"]["prompts"],
              "max_new_tokens": report["settings"]["max_new_tokens"],
              "teacher_forward_ms": report["settings"]["teacher_forward_ms"],
              "teacher_forward_2_ms": report["settings"]["teacher_forward_2_ms"],
              "teacher_alone_ms_per_token": report["settings"]["teacher_alone_ms_per_token"],
              "matmul_ways": settings["matmul_ways"], "matmul_choices": settings["matmul_choices"],
              "errors": report["errors"], **load,
              "load_average_end": os.getloadavg()[0]}
    append_json_line(out, record)
    print(json.dumps(record))


def _best(out: Path, prefix: str) -> dict | None:
    """The fastest seed of the fastest draft (row and size) by its mean speedup over seeds: one seed's ratio can
    be flattered by a load that slowed only its baseline, a mean over seeds less so."""
    one = _default_proposals()
    rows = [r for r in read_json_lines(out) if r["row"].startswith(prefix) and r["draft_vocab"] is not None
            and r["proposals"] == one and r["matmul"] == "timed" and not _temperature(r)]
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["row"], r["layers"]), []).append(r)
    best = max(groups.values(), key=lambda group: statistics.mean(r["speedup"] for r in group), default=None)
    return max(best, key=lambda r: r["speedup"]) if best else None


def table(records: list[dict]) -> str:
    """Mean over seeds per (row, layers, head, proposals, products, decoding): acceptance, tokens per forward,
    speedup; ± half the seeds' spread. Greedy rows first, then sampled ones."""
    groups: dict = {}
    for r in records:
        key = (r["layers"], r["row"], r["draft_vocab"], r["proposals"], r["matmul"], _temperature(r))
        groups.setdefault(key, []).append(r)

    def cell(values, digits):
        mean = statistics.mean(values)
        return f"{mean:.{digits}f}" + (f" ± {(max(values) - min(values)) / 2:.{digits}f}" if len(values) > 1 else "")

    def order(key):
        layers, row, vocab, proposals, matmul, temperature = key
        return (temperature, row == "prompt_lookup", layers, list(_ORDER).index(row) if row in _ORDER else 0,
                vocab is None, proposals != _default_proposals(), matmul != "timed", proposals)

    lines = []
    for key in sorted(groups, key=order):
        layers, row, vocab, proposals, matmul, temperature = key
        group = groups[key]
        lookup = row == "prompt_lookup"
        identical = "–" if temperature else \
            f"{sum(g['identical'] for g in group)}/{sum(g['prompts'] for g in group)}"
        lines.append(["–" if lookup else f"{layers}", "prompt lookup" if lookup else row,
                      "–" if lookup else "whole" if vocab is None else f"{vocab:,}",
                      "adaptive" if proposals == 0 else str(proposals), matmul,
                      f"T = {temperature:g}" if temperature else "greedy", str(len(group)),
                      cell([g["acceptance"] or 0.0 for g in group], 3),
                      cell([g["tokens_per_forward"] for g in group], 2),
                      cell([g["speedup"] for g in group], 2) + "×", identical])
    header = ["layers", "draft", "head", "proposals", "products", "decoding", "seeds", "acceptance", "tokens/forward",
              "speedup", "identical"]
    return "\n".join(table_lines(header, lines))


def costs_line(costs: dict) -> str:
    """The step costs as one sentence: what a plain step, a verification and a draft step cost here."""
    ms = costs["ms"]
    drafts = "; ".join(f"{name} {value:.1f} ms" for name, value in ms.items() if not name.startswith("teacher"))

    def widths(prefix: str) -> str:
        return (f"{ms[prefix + '1 new']:.1f} ms for 1 new token (plain decoding), {ms[prefix + '2 new']:.1f} ms "
                f"for 2, {ms[prefix + '4 new']:.1f} ms for 4, {ms[prefix + '8 new']:.1f} ms for 8 and "
                f"{ms[prefix + '16 new']:.1f} ms for 16")

    torch_products = (f"; with torch's own products {widths('teacher, torch products, ')}"
                      if "teacher, torch products, 1 new" in ms else "")
    return (f"One cached teacher forward ({costs['context_tokens']}-token context, {costs['threads']} threads, load "
            f"average {costs['load_average']:.2f}), timed products: {widths('teacher, ')} (verifying k proposals "
            f"reads k + 1){torch_products}. One draft step, timed products: {drafts}.")


def plot(path: Path, image: Path) -> None:
    """Speedup against tokens per teacher forward, one point per measured draft (seeds apart), prompt lookup marked."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    records = read_json_lines(path)
    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    for r in (r for r in records if not _temperature(r)):  # greedy rows: sampled ones are in the table
        label = "prompt lookup" if r["row"] == "prompt_lookup" else f"{r['row']} {r['layers']}L"
        if r["proposals"] != _default_proposals() or r["matmul"] != "timed":
            label += f" ({'adaptive' if r['proposals'] == 0 else r['proposals']}, {r['matmul']})"
        marker = "*" if r["row"] == "prompt_lookup" else "o" if r["draft_vocab"] else "s"
        axes.scatter(r["tokens_per_forward"], r["speedup"], marker=marker, s=60 if marker == "*" else 25)
        axes.annotate(label, (r["tokens_per_forward"], r["speedup"]), fontsize=6, xytext=(3, 2),
                      textcoords="offset points")
    axes.axhline(1.0, color="grey", linewidth=0.8)
    axes.set_xlabel("new tokens per teacher forward")
    axes.set_ylabel("speedup against the teacher alone")
    axes.set_title("Drafts for SmolLM2-135M on 2 CPU cores, greedy (o narrow head, s whole head)", fontsize=9)
    FigureCanvasAgg(figure).print_png(str(image))


_ORDER = ("cut", "ce-pydoc", "kd-pydoc", "ce-answers", "kd-answers", "kd-answers-tvd", "kd-answers-rkl",
          "ce-answers-4x", "kd-answers-4x", "ce-answers-16x", "kd-answers-16x")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    for verb in ("train", "measure"):
        one = verbs.add_parser(verb)
        one.add_argument("work", type=Path)
        one.add_argument("--sizes", default="2,4")
        one.add_argument("--seeds", default="0,1")
        one.add_argument("--tokens", type=int, default=24576, help="trained tokens per row")
        one.add_argument("--teacher", default=TEACHER)
        if verb == "train":
            one.add_argument("--train-prompts", type=int, default=400, help="training prompts the teacher answers")
            one.add_argument("--answer-tokens", type=int, default=96, help="tokens per answer at most")
        if verb == "measure":
            one.add_argument("--out", type=Path, default=Path("benchmarks/results/draft_models.jsonl"))
            one.add_argument("--prompts", type=int, default=8, help="held-out prompts")
            one.add_argument("--new-tokens", type=int, default=48)
            one.add_argument("--draft-vocab", type=int, default=8192)
    shown = verbs.add_parser("table")
    shown.add_argument("path", type=Path, nargs="?", default=Path("benchmarks/results/draft_models.jsonl"))
    drawn = verbs.add_parser("plot")
    drawn.add_argument("path", type=Path, nargs="?", default=Path("benchmarks/results/draft_models.jsonl"))
    drawn.add_argument("--image", type=Path, default=Path("benchmarks/results/draft_models.png"))
    return parser


def main(argv=None) -> None:
    args = build_parser().parse_args(argv)
    if args.verb == "table":
        print(table(read_json_lines(args.path)))
        return
    if args.verb == "plot":
        plot(args.path, args.image)
        return
    sizes, seeds = [int(x) for x in args.sizes.split(",")], [int(x) for x in args.seeds.split(",")]
    if args.verb == "train":
        train(args.work, sizes, seeds, args.tokens, args.teacher, args.train_prompts, args.answer_tokens)
    else:
        measure(args.work, args.out, sizes, seeds, args.prompts, args.new_tokens, args.draft_vocab, args.teacher)


if __name__ == "__main__":
    main()
