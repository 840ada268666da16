"""Side-by-side evaluation of models on held-out data.

For every model: perplexity and next-token accuracy on the data; KL to the
teacher and top-1 agreement with it (the top-K bucket KL from a cache, or the
full-vocabulary KL when the teacher itself is given); parameters, size on
disk, forward and generation throughput, and peak memory. Each model is
evaluated in its own process (:func:`destila.eval.measure.run_isolated`),
so its peak memory is its own.
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from destila.cache import CorruptShardError
from destila.cache.checks.rows import target_value_fault
from destila.cache.dataset import open_cache
from destila.constants import IGNORE_INDEX
from destila.data import as_sequences, collate, split_indices
from destila.eval.bytes import token_byte_lengths
from destila.eval.cross import held_out_source, with_label_bytes
from destila.eval.measure import PeakMeter, run_isolated
from destila.eval.progress import ProgressFile, run_with_progress
from destila.eval.quality import metrics_from_sums, quality_sums
from destila.eval.spec import DEFAULT_PROMPT, EvalSpec
from destila.eval.speed import forward_tokens_per_second, generate, size_on_disk
from destila.generation.prompts import Prompt, load_prompts
from destila.io.progress import progress_bar
from destila.models import load_causal_lm, load_tokenizer, resolve_source

def evaluate_model(spec: EvalSpec, model: str | None = None, *, progress_file: str | None = None) -> dict:
    """Every metric of ``model`` (one of ``spec.models``; may be left out when the spec names one) on the
    spec's held-out text (see the module docstring); a JSON-able dict.

    Data: ``spec.cache`` (its sequences ``spec.indices``, or the part
    ``spec.eval_fraction`` holds out, or all of them) or ``spec.data`` (a
    :class:`~destila.data.DataSpec`: a source, or documents given in Python),
    with the model's tokenizer, up to ``spec.max_tokens`` tokens. Metrics
    cover the positions the loss mask keeps; ``tokens`` says how many,
    ``documents`` from how many packed documents (or pieces of them), and
    ``scored_positions`` which (``all``, or only the ``assistant`` turns /
    ``completion`` a cache or data spec was built to train). ``spec.teacher``
    adds the full-vocabulary KL and agreement. ``peak_bytes`` is the model's
    own peak (weights, forward, generation), taken before any teacher is loaded.
    Generation samples: ``spec.prompt``, or every prompt of ``spec.prompts``
    (:func:`~destila.generation.prompts.load_prompts`), rendered with the
    model's chat template when it has one. ``progress_file``: where the latest
    state is written for a watching parent (:mod:`destila.eval.progress`).
    """
    model = _model_of(spec, model)
    report = ProgressFile(progress_file)
    report(0, None, "loading")
    prompts = load_prompts(spec.prompts) if spec.prompts is not None else [Prompt(text=spec.prompt or DEFAULT_PROMPT)]
    cached = open_cache(spec.cache) if spec.cache is not None else None  # its files checked before the model loads
    meter = PeakMeter(spec.device)
    tokenizer = load_tokenizer(model)
    # The held-out rows are read (each checked) or the data tokenised before the model loads: an empty or
    # damaged input costs no model load.
    items, scored, byte_tokenizer, source = _held_out_items(spec, model, tokenizer, cached)
    lm = load_causal_lm(model, device=spec.device)
    _check_vocabulary(spec, model, lm, source, cached, items)
    batches = [{k: v.to(spec.device) for k, v in collate(items[i:i + spec.batch_size]).items()}
               for i in range(0, len(items), spec.batch_size)]
    report(0, None, "forward speed")
    forward_speed = forward_tokens_per_second(lm, batches[0]["input_ids"])
    samples, generate_speed, templated = generation_samples(lm, tokenizer, prompts, spec.new_tokens, report)
    scoring = lambda done, total: report(done, total, f"scoring {len(items)} sequences")  # noqa: E731
    sums, peak = _scored_sums(spec, lm, batches, meter, token_byte_lengths(byte_tokenizer), scoring, report)
    path = resolve_source(model)[0]
    return {
        "model": model, "path": path, **metrics_from_sums(sums), "documents": _documents_of(batches),
        "scored_positions": scored, "parameters": sum(p.numel() for p in lm.parameters()),
        "size_bytes": size_on_disk(path), "forward_tokens_per_second": forward_speed,
        "generate_tokens_per_second": generate_speed, "peak_bytes": peak, "sample": samples[0]["text"],
        "prompt": samples[0]["prompt"], "samples": samples, "chat_template_applied": templated,
    }


def _model_of(spec: EvalSpec, model: str | None) -> str:
    """``model``, or the spec's only model; refuses a spec without held-out data."""
    if model is None:
        if len(spec.models) != 1:
            raise ValueError(f"eval: the spec names {len(spec.models)} models; say which one to evaluate")
        model = spec.models[0]
    if not spec.held_out:
        raise ValueError("eval: give either a cache or data")
    return model


def _held_out_items(spec: EvalSpec, model: str, tokenizer, cached) -> tuple[list[dict], str, object, object]:
    """``(items, scored positions, tokenizer of the label ids, the source read)``: the held-out sequences, from the
    opened cache ``cached`` (read in the model's tokens when its tokenizer is another) or from ``spec.data``."""
    if cached is None:
        packed = as_sequences(spec.data, tokenizer)
        return [packed[i] for i in range(len(packed))], spec.data.loss_on, tokenizer, packed
    source = held_out_source(cached, model, tokenizer, spec.cache)  # another tokenizer: the cache in its tokens
    if source is not cached and spec.teacher is not None:
        raise ValueError(f"eval: {model} has another tokenizer than the teacher's, so the teacher's logits are "
                         f"over other tokens; drop --teacher (the cache's KL and agreement are measured on the "
                         "aligned one-to-one positions)")
    chosen = list(range(len(source))) if spec.indices is None else list(spec.indices)
    if spec.eval_fraction is not None:
        chosen = split_indices(len(source), spec.eval_fraction)[1]
    if spec.max_tokens is not None:
        chosen = chosen[: max(1, spec.max_tokens // cached.seq_len)]
    items = [with_label_bytes(source[i]) for i in chosen]  # bytes per label, where the cache has spans
    # Without spans: the bytes each label id spells, in the tokenizer of the ids (the cache's own copy of
    # the teacher's; the model's when the cache is read in its tokens).
    byte_tokenizer = (_cache_tokenizer(cached) or tokenizer) if source is cached else tokenizer
    return items, (cached.manifest.data or {}).get("loss_on") or "all", byte_tokenizer, source


def _check_vocabulary(spec: EvalSpec, model: str, lm, source, cached, items) -> None:
    """Refuse a model whose output head is not the cache's vocabulary (the cache's ids would index past it).
    Rows that do not record their vocabulary (Axolotl's) take the model's, as training takes the student's, and
    their ``items`` are checked against it."""
    rows = lm.get_output_embeddings().weight.shape[0]
    if cached is not None and source is cached and source.vocab_size is None:
        source.assume_vocab_size(rows)
        fault = next((found for found in (target_value_fault(item, rows) for item in items) if found), None)
        if fault is not None:
            raise ValueError(f"eval: the rows of {spec.cache} hold {fault}, outside {model}'s vocabulary of {rows} "
                             "tokens; evaluate on rows of this model's teacher")
    if cached is not None and source is cached and rows != source.vocab_size:
        raise ValueError(
            f"eval: {model} has a vocabulary of {rows} tokens but the cache at {spec.cache} was made with "
            f"{source.vocab_size}; evaluate on a cache of this model's teacher, or pass --data instead"
        )


def _scored_sums(spec: EvalSpec, lm, batches, meter, byte_lengths, scoring, report) -> tuple:
    """``(quality sums, the model's peak bytes)``; the peak is taken before a teacher loads."""
    if spec.teacher is None:
        sums = quality_sums(lm, batches, None, spec.chunk_size, on_batch=scoring, byte_lengths=byte_lengths)
        return sums, meter.peak()
    peak = meter.peak()
    report(0, None, "loading the teacher")
    sums = quality_sums(lm, batches, load_causal_lm(spec.teacher, device=spec.device), spec.chunk_size,
                        on_batch=scoring, byte_lengths=byte_lengths)
    return sums, peak


def _documents_of(batches: list[dict]) -> int:
    """:func:`documents_in` over the rows of collated ``batches``."""
    return documents_in([{k: v[row] for k, v in batch.items() if k in ("labels", "position_ids")}
                         for batch in batches for row in range(batch["labels"].shape[0])])


def evaluate_in_worker(spec: dict, model: str, progress_file: str | None = None) -> dict:
    """:func:`evaluate_model` in a fresh process: the spec arrives as JSON (``dataclasses.asdict``)."""
    return evaluate_model(EvalSpec(**spec), model, progress_file=progress_file)


def _cache_tokenizer(source):
    """The tokenizer stored with a cache or its export (a copy of its teacher's), or None when it has none."""
    path = getattr(source, "tokenizer_path", None)  # None for a datasets.Dataset given directly
    if path is None or not path.is_dir():
        return None
    from transformers import AutoTokenizer  # heavy; evaluate_model has loaded it already by now

    return AutoTokenizer.from_pretrained(path)


def documents_in(items: list[dict]) -> int:
    """Documents (or pieces of one cut by a sequence end) in ``items`` (collated rows: ``labels [L]``, and
    ``position_ids [L]`` when packed) with at least one scored position.

    A packed document starts where the position ids restart; padding, and a
    prompt-only piece, score nothing and are not counted. Naive equivalent:
    ``sum(any(label != -100 for label in doc.labels) for seq in items for doc in seq.documents)``.
    """
    count = 0
    for item in items:
        scored = item["labels"] != IGNORE_INDEX
        positions = item.get("position_ids")
        if positions is None:  # not packed: one document per sequence
            count += int(scored.any())
            continue
        starts = (positions == 0).nonzero().flatten().tolist()
        bounds = sorted({0, *starts, len(positions)})
        count += sum(int(scored[a:b].any()) for a, b in zip(bounds, bounds[1:]))
    return count


def _shown(prompt: Prompt) -> str:
    return prompt.text if prompt.text is not None else prompt.messages[-1]["content"]


def generation_samples(lm, tokenizer, prompts: list[Prompt], new_tokens: int, report) -> tuple[list[dict], float, bool]:
    """Greedy samples of ``prompts`` (``[{"prompt", "text"}]``), new tokens/s over all of them, and whether the
    chat template was applied (it is whenever the tokenizer has one)."""
    from destila.generation.sampling import render  # imports transformers (heavy): only when generating

    templated = bool(getattr(tokenizer, "chat_template", None))
    if not templated and any(p.messages is not None for p in prompts):
        raise ValueError("prompts: conversations (messages) need a chat template, and this model's tokenizer has "
                         "none; give text prompts (a .txt file, one per line) instead")
    samples, seconds = [], 0.0
    for number, prompt in enumerate(prompts):
        report(number, len(prompts), "generating samples")
        text, speed = generate(lm, tokenizer, render(prompt, tokenizer, templated), new_tokens, templated)
        samples.append({"prompt": _shown(prompt), "text": text})
        seconds += new_tokens / speed
    return samples, new_tokens * len(prompts) / seconds, templated


# A worker's failure that is the user's input (its last traceback line): shown as one line, not a crash.
_USER_ERRORS = ("ValueError: ", "FileNotFoundError: ",
                f"{CorruptShardError.__module__}.{CorruptShardError.__qualname__}: ")


def evaluate_models(spec: EvalSpec, *, isolated: bool = True, timeout: float | None = None,
                    progress: bool = False) -> list[dict]:
    """:func:`evaluate_model` for each of ``spec.models``, each in a fresh process when ``isolated`` (for its
    peak memory).

    ``progress``: show a progress bar per model (its stage, batches scored, elapsed time) on the terminal.
    """
    results = []
    shipped = dataclasses.asdict(spec)  # what a worker process rebuilds its spec from
    show = progress and isolated
    with tempfile.TemporaryDirectory(prefix="destila-eval-") as tmp:
        for number, model in enumerate(spec.models, start=1):
            if not isolated:
                results.append(evaluate_model(spec, model))
                continue
            state = Path(tmp) / f"progress-{number}"
            kwargs = {"spec": shipped, "model": model, **({"progress_file": str(state)} if show else {})}
            launch = lambda: run_isolated("destila.eval.run:evaluate_in_worker", kwargs,  # noqa: E731
                                          device=spec.device, timeout=timeout)
            label = f"model {number}/{len(spec.models)} {Path(model).name or model}"
            if show:
                with progress_bar(unit="batch", dynamic_ncols=True) as bar:
                    run = run_with_progress(launch, state, bar, label, succeeded=lambda r: r["status"] == "ok")
            else:
                run = launch()
            if run["status"] == "error" and str(run["error"]).startswith(_USER_ERRORS):
                error_type, _, message = str(run["error"]).partition(": ")  # the worker's own one-line message
                raise (FileNotFoundError if error_type == "FileNotFoundError" else ValueError)(message)
            if run["status"] != "ok":
                raise RuntimeError(f"eval: evaluating {model} failed ({run['status']}): {run.get('error')}")
            results.append(run["result"])
    return results
