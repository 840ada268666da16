"""The teacher alone, with a draft, and with prompt lookup: speed, acceptance and exactness on the same prompts.

Every prompt is answered three ways with ``transformers``' ``generate``, in
turn, with one generation config (KV cache, the teacher's dtype and thread
count, greedy or seeded sampling, the same stop tokens and length):

- ``teacher``: the teacher alone, plain decoding (the baseline);
- ``draft``: assisted generation, ``generate(assistant_model=draft)`` (the
  draft on the teacher's tokenizer), proposing ``spec.draft_tokens`` tokens
  before every teacher forward;
- ``prompt_lookup``: ``generate(prompt_lookup_num_tokens=N)``, which
  proposes tokens by copying n-grams of the prompt and needs no draft.

All three run inside one :func:`~destila.generation.small_matmul.small_matmul`
context (``spec.matmul``): on the CPU each small product takes the faster of
two ways, timed once per shape, for every way alike.

Per way: new tokens per second, acceptance (proposed tokens the teacher
kept), new tokens per teacher forward, and for greedy decoding how many
answers are token for token the teacher's own. Each teacher forward's time
is split into the teacher's forward, the draft's forwards and the rest
(``generate``'s own loop), and its whole cost is given in plain decoding
steps (``forward_cost``), so that speedup = tokens per forward / forward
cost: a draft pays when its tokens per forward exceed that cost. Greedy
speculative decoding must reproduce the teacher's text exactly; an answer
that differs is reported as an error, never averaged into the speed.
Naive equivalent of one way on one prompt::

    start = time.perf_counter()
    out = teacher.generate(ids, assistant_model=draft, do_sample=False, max_new_tokens=N)
    tokens_per_second = (out.shape[1] - ids.shape[1]) / (time.perf_counter() - start)

A one-token cached forward of the teacher is timed too: plain ``generate``
should cost about that per token, and the report says so when it does not
(a slow baseline would flatter every ratio).
"""

from __future__ import annotations

import logging
import statistics
import time
from contextlib import contextmanager

import torch

from destila.draft.counting import counting
from destila.draft.loading import load_draft, load_teacher
from destila.draft.spec import WAYS, DraftEvalSpec
from destila.generation.prompts import load_prompts
from destila.generation.run import use_chat_template
from destila.generation.small_matmul import small_matmul
from destila.io.progress import progress_bar

# Plain generate within this factor of the bare forward cost per token counts as a fair baseline.
_BASELINE_SLACK = 1.5
# A forward of 1 new token costing more than this times one of 2 is not at its fastest: one row can always be taken
# as two (the timed products' weight-major way pads it), so a slower one-row forward means a mistimed choice.
_WIDTH_SLACK = 1.1
# transformers' assisted generation calls the draft's own generate with a generation config and max/min_new_tokens
# together, and then warns that passing both is deprecated: its own inner call, which no flag of ours can change.
_INNER_GENERATE_WARNING = "Passing `generation_config` together with generation-related"


def _generation_config(spec: DraftEvalSpec, stop: list[int], pad: int):
    # transformers takes seconds to import: only when a draft is measured
    from transformers import GenerationConfig

    sampling = {"do_sample": True, "temperature": spec.temperature, "top_k": 0, "top_p": 1.0} if not spec.greedy \
        else {"do_sample": False}
    return GenerationConfig(max_new_tokens=spec.max_new_tokens, pad_token_id=pad, eos_token_id=stop,
                            num_beams=1, use_cache=True, **sampling)


def _way_options(way: str, draft) -> dict:
    """``generate``'s keywords beside the config: the draft for assisted generation."""
    return {"assistant_model": draft} if way == "draft" else {}


def _way_config(config, way: str, spec: DraftEvalSpec, max_new_tokens: int | None = None):
    changes = {"prompt_lookup_num_tokens": spec.prompt_lookup_tokens} if way == "prompt_lookup" else {}
    if max_new_tokens is not None:
        changes["max_new_tokens"] = max_new_tokens
    return config.__class__.from_dict({**config.to_dict(), **changes}) if changes else config


@torch.no_grad()
def _answer(teacher, ids, config, options: dict, draft, seed: int | None) -> dict:
    """One ``generate`` call, timed and counted: ``{"tokens": [...], "seconds", "counts"}``."""
    if seed is not None:
        torch.manual_seed(seed)  # speculative sampling draws from torch's global generator
    with counting(teacher, ids.shape[1], draft if "assistant_model" in options else None) as counts:
        start = time.perf_counter()
        out = teacher.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config,
                               **options)
        seconds = time.perf_counter() - start
    return {"tokens": out[0, ids.shape[1]:].tolist(), "seconds": seconds, "counts": counts}


class _DropInnerGenerateWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith(_INNER_GENERATE_WARNING)


@contextmanager
def _quiet_inner_generate():
    """Within the block, transformers' deprecation warning about its assisted loop's own inner ``generate`` call is
    dropped (every other message of its generation logger passes)."""
    logger = logging.getLogger("transformers.generation.utils")
    drop = _DropInnerGenerateWarning()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


@torch.no_grad()
def forward_seconds(model, ids, repeats: int = 8, width: int = 1) -> float:
    """Median seconds of one cached forward of ``width`` new tokens after ``ids`` (``width`` 1: what plain
    decoding pays per token; more: what verifying ``width − 1`` proposals costs)."""
    # transformers takes seconds to import: only when a forward is timed
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
    step = ids[:, -width:]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(input_ids=step, cache=cache, use_cache=True, logits_to_keep=width)
        times.append(time.perf_counter() - start)
        cache.crop(-width)
    return statistics.median(times)


def _seconds(answers: list[dict]) -> float:
    return sum(a["seconds"] for a in answers)


def _summary(way: str, answers: list[dict], reference: list[dict] | None) -> dict:
    tokens = sum(len(a["tokens"]) for a in answers)
    seconds = _seconds(answers)
    forwards = sum(a["counts"].teacher_forwards for a in answers)
    proposed = sum(a["counts"].proposed for a in answers)
    accepted = sum(a["counts"].accepted(len(a["tokens"])) for a in answers)
    row = {"way": way, "new_tokens": tokens, "seconds": round(seconds, 4),
           "tokens_per_second": round(tokens / seconds, 3) if seconds else None,
           "teacher_forwards": forwards, "tokens_per_forward": round(tokens / forwards, 4) if forwards else None,
           "proposed": proposed, "accepted": accepted,
           "acceptance": round(accepted / proposed, 4) if proposed else None,
           "draft_forwards": sum(a["counts"].draft_forwards for a in answers)}
    if forwards:  # where each teacher forward's time went: the teacher, the draft, generate's own loop
        teacher_seconds = sum(a["counts"].teacher_seconds for a in answers)
        draft_seconds = sum(a["counts"].draft_seconds for a in answers)
        row.update(teacher_ms_per_forward=round(1000 * teacher_seconds / forwards, 3),
                   draft_ms_per_forward=round(1000 * draft_seconds / forwards, 3),
                   other_ms_per_forward=round(1000 * (seconds - teacher_seconds - draft_seconds) / forwards, 3))
    if reference is not None:
        differing = [i for i, (a, r) in enumerate(zip(answers, reference)) if a["tokens"] != r["tokens"]]
        row.update(identical=len(answers) - len(differing), differing_prompts=differing)
    return row


def measure_draft(spec: DraftEvalSpec, *, progress: bool = True, teacher: tuple | None = None,
                  linear=None) -> dict:
    """Answer every prompt of ``spec.prompts`` three ways; the report of :mod:`destila.draft.measure`.

    ``teacher`` = ``(model, tokenizer)`` already loaded skips loading it, and ``linear`` (a
    :class:`~destila.generation.small_matmul.TimedLinear`) keeps the products' ways chosen before: a benchmark
    measures many drafts against one teacher, whose baseline should not change from draft to draft.
    Returns ``{"settings", "ways": [row per way], "errors": [...]}``; each row has ``speedup`` (tokens/s against
    the teacher alone).
    """
    # destila.generation.sampling imports transformers: only when a draft is measured
    from destila.generation.sampling import stop_ids

    teacher, tokenizer = teacher or load_teacher(spec)
    draft = load_draft(spec, teacher, tokenizer) if "draft" in spec.ways else None
    prompts = load_prompts(spec.prompts)
    encoded, use_template = encode_prompts(tokenizer, prompts, teacher.device)
    stop = stop_ids(teacher, tokenizer)
    config = _generation_config(spec, stop, tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0])
    ways = [way for way in WAYS if way in spec.ways]
    options = {way: _way_options(way, draft) for way in ways}
    configs = {way: _way_config(config, way, spec) for way in ways}
    if draft is not None and spec.draft_tokens:
        propose_every_step(draft.generation_config, spec.draft_tokens)
    models = (teacher,) if draft is None else (teacher, draft)
    fixed = "torch" if spec.matmul == "torch" else None
    with small_matmul(*models, way=fixed, linear=linear if fixed is None else None) as products, \
            _quiet_inner_generate():
        for way in ways:  # first calls pay one-time costs (allocator, kernels, timing the products) for every way
            _answer(teacher, encoded[0], _way_config(config, way, spec, min(4, spec.max_new_tokens)), options[way],
                    draft, None)
        answers = {way: [] for way in ways}
        bar = progress_bar(total=len(encoded) * len(ways), unit="answer", desc="draft", show=progress)
        with bar:
            for number, ids in enumerate(encoded):
                for way in ways:  # in turn per prompt: a load that comes and goes falls on all three alike
                    seed = None if spec.greedy else spec.seed + number
                    answers[way].append(_answer(teacher, ids, configs[way], options[way], draft, seed))
                    bar.update(1)
        forward = forward_seconds(teacher, encoded[0])
        forward_two = forward_seconds(teacher, encoded[0], width=2)
    reference = answers["teacher"] if spec.greedy else None
    rows = [_summary(way, answers[way], reference) for way in ways]
    base = rows[0]["tokens_per_second"]
    step = _seconds(answers[ways[0]]) / rows[0]["new_tokens"] if rows[0]["new_tokens"] else None  # plain, per token
    for row in rows:
        row["speedup"] = round(row["tokens_per_second"] / base, 4) if base and row["tokens_per_second"] else None
        # One teacher forward with its proposals, in plain decoding steps: speedup = tokens per forward / this.
        row["forward_cost"] = round(_seconds(answers[row["way"]]) / row["teacher_forwards"] / step, 4) \
            if step and row["teacher_forwards"] else None
    settings = {**_settings(spec, len(prompts), use_template, forward, forward_two, rows[0]),
                "matmul_ways": products.summary(),
                "matmul_choices": products.listing(), "matmul_wrapped_layers": products.wrapped_layers}
    return {"settings": settings, "ways": rows, "errors": _errors(rows), "texts": _texts(tokenizer, answers,
                                                                                         len(prompts))}


def encode_prompts(tokenizer, prompts: list, device="cpu") -> tuple[list, bool]:
    """Each :class:`~destila.generation.prompts.Prompt` as the teacher reads it (its chat template with a generation
    prompt when it has one, as ``destila generate`` decides): ``([ids [1, n] per prompt], template applied)``."""
    # destila.generation.sampling imports transformers: only when prompts are encoded
    from destila.generation.sampling import render

    use_template = use_chat_template(tokenizer, prompts, "auto")
    return [tokenizer(render(p, tokenizer, use_template), add_special_tokens=False, return_tensors="pt")
            ["input_ids"].to(device) for p in prompts], use_template


def propose_every_step(config, tokens: int) -> None:
    """Set a draft's ``GenerationConfig`` (in place) to propose ``tokens`` tokens before every teacher forward,
    whatever its confidence: transformers' assisted generation reads these from the assistant's config."""
    config.num_assistant_tokens = tokens
    config.num_assistant_tokens_schedule = "constant"
    config.assistant_confidence_threshold = 0.0


def _settings(spec: DraftEvalSpec, prompts: int, use_template: bool, forward: float, forward_two: float,
              baseline: dict) -> dict:
    per_token = baseline["seconds"] / baseline["new_tokens"] if baseline["new_tokens"] else None
    return {"teacher": spec.teacher, "draft": spec.draft, "prompts": prompts, "max_new_tokens": spec.max_new_tokens,
            "temperature": spec.temperature, "seed": spec.seed if not spec.greedy else None,
            "draft_tokens": spec.draft_tokens, "prompt_lookup_tokens": spec.prompt_lookup_tokens,
            "draft_vocab": spec.draft_vocab, "matmul": spec.matmul,
            "chat_template_applied": use_template, "threads": torch.get_num_threads(),
            "teacher_forward_ms": round(forward * 1000, 3), "teacher_forward_2_ms": round(forward_two * 1000, 3),
            "teacher_alone_ms_per_token": round(per_token * 1000, 3) if per_token else None,
            "baseline_fair": per_token is not None and per_token <= _BASELINE_SLACK * forward,
            "one_token_forward_fair": forward <= _WIDTH_SLACK * forward_two}


def _errors(rows: list[dict]) -> list[str]:
    errors = []
    for row in rows:
        if row.get("differing_prompts"):
            errors.append(f"{row['way']}: greedy answers to prompts {row['differing_prompts']} differ from the "
                          "teacher's own; speculative decoding must reproduce them token for token")
    return errors


def _texts(tokenizer, answers: dict, prompts: int) -> list[dict]:
    """Each prompt's answers, decoded, for the report's file (a reader can see any difference)."""
    return [{way: tokenizer.decode(answers[way][i]["tokens"], skip_special_tokens=True) for way in answers}
            for i in range(prompts)]
