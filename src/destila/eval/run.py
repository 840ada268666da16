"""Side-by-side evaluation of models on held-out data.

For every model: perplexity and next-token accuracy on the data; KL to the
teacher and top-1 agreement with it (the top-K bucket KL from a cache, or the
full-vocabulary KL when the teacher itself is given); parameters, size on
disk, forward and generation throughput, and peak memory. Each model is
evaluated in its own process (:func:`destila.eval.measure.run_isolated`),
so its peak memory is its own.
"""

from __future__ import annotations

from destila.cache.dataset import open_cache
from destila.constants import IGNORE_INDEX
from destila.data import DataSpec, collate, packed_source, texts_source
from destila.eval.measure import PeakMeter, run_isolated
from destila.eval.progress import ProgressFile, run_with_progress
from destila.eval.quality import metrics_from_sums, quality_sums
from destila.eval.speed import forward_tokens_per_second, generate, size_on_disk
from destila.generation.prompts import Prompt, load_prompts
from destila.losses.options import DEFAULT_CHUNK_SIZE
from destila.models import load_causal_lm, load_tokenizer, resolve_source

DEFAULT_PROMPT = "The `with` statement in Python"


def evaluate_model(
    model: str, *, cache: str | None = None, indices: list[int] | None = None,
    data: str | list[str] | dict | DataSpec | None = None,
    teacher: str | None = None, seq_len: int = 512, max_tokens: int | None = 16384, text_field: str = "text",
    batch_size: int = 4, chunk_size: int = DEFAULT_CHUNK_SIZE, prompt: str = DEFAULT_PROMPT, new_tokens: int = 32,
    prompts: str | list | None = None, device: str = "cpu", progress_file: str | None = None,
) -> dict:
    """Every metric of one model (see the module docstring); a JSON-able dict.

    Data: ``cache`` (its sequences ``indices``, or all of them) or ``data``
    (a :class:`~destila.data.DataSpec` or its fields as a dict; a source name
    or a list of texts packed into ``seq_len`` tokens), with the model's
    tokenizer, up to ``max_tokens`` tokens. Metrics cover the positions the
    loss mask keeps (assistant turns, completions, whole documents);
    ``tokens`` says how many. ``teacher`` adds the full-vocabulary KL and
    agreement. ``peak_bytes`` is the model's own peak (weights, forward,
    generation), taken before any teacher is loaded. ``documents`` counts the
    packed documents (or pieces of them) the scored tokens come from, and
    ``scored_positions`` names which positions count (``all``, or only the
    ``assistant`` turns / ``completion`` a cache or data spec was built to train).

    Generation samples: ``prompt``, or every prompt of ``prompts`` (a ``.txt``
    file, one per line; a ``.jsonl`` file with ``messages`` or ``prompt``; or
    a list), rendered with the model's chat template when it has one.
    ``progress_file``: where the latest state is written for a watching parent
    (:mod:`destila.eval.progress`).
    """
    if (cache is None) == (data is None):
        raise ValueError("eval: give either a cache or data")
    report = ProgressFile(progress_file)
    report(0, None, "loading")
    samples_prompts = load_prompts(prompts) if prompts is not None else [Prompt(text=prompt)]
    meter = PeakMeter(device)
    lm = load_causal_lm(model, device=device)
    tokenizer = load_tokenizer(model)
    if cache is not None:
        source = open_cache(cache)
        rows = lm.get_output_embeddings().weight.shape[0]
        if rows != source.vocab_size:  # the cache's ids would index past (or short of) the model's head
            raise ValueError(
                f"eval: {model} has a vocabulary of {rows} tokens but the cache at {cache} was made with "
                f"{source.vocab_size}; evaluate on a cache of this model's teacher, or pass --data instead"
            )
        scored = (source.manifest.data or {}).get("loss_on") or "all"
        chosen = list(range(len(source))) if indices is None else list(indices)
        if max_tokens is not None:
            chosen = chosen[: max(1, max_tokens // source.seq_len)]
        items = [source[i] for i in chosen]
    else:
        if isinstance(data, (list, tuple)):
            packed = texts_source(list(data), tokenizer, seq_len=seq_len, max_tokens=max_tokens)
            scored = "all"
        else:
            spec = DataSpec(**data) if isinstance(data, dict) else data
            spec = spec if isinstance(spec, DataSpec) else DataSpec(str(data), text_field=text_field, seq_len=seq_len)
            packed = packed_source(spec.replace(max_tokens=max_tokens or spec.max_tokens), tokenizer)
            scored = spec.loss_on
        items = [packed[i] for i in range(len(packed))]

    batches = [{k: v.to(device) for k, v in collate(items[i:i + batch_size]).items()}
               for i in range(0, len(items), batch_size)]
    report(0, None, "forward speed")
    forward_speed = forward_tokens_per_second(lm, batches[0]["input_ids"])
    samples, generate_speed, templated = generation_samples(lm, tokenizer, samples_prompts, new_tokens, report)
    scoring = lambda done, total: report(done, total, f"scoring {len(items)} sequences")  # noqa: E731
    if teacher is None:
        sums = quality_sums(lm, batches, None, chunk_size, on_batch=scoring)
        peak = meter.peak()
    else:
        peak = meter.peak()
        report(0, None, "loading the teacher")
        sums = quality_sums(lm, batches, load_causal_lm(teacher, device=device), chunk_size, on_batch=scoring)
    path = resolve_source(model)[0]
    return {
        "model": model,
        "path": path,
        **metrics_from_sums(sums),
        "documents": documents_in([{k: v[row] for k, v in batch.items() if k in ("labels", "position_ids")}
                                   for batch in batches for row in range(batch["labels"].shape[0])]),
        "scored_positions": scored,
        "parameters": sum(p.numel() for p in lm.parameters()),
        "size_bytes": size_on_disk(path),
        "forward_tokens_per_second": forward_speed,
        "generate_tokens_per_second": generate_speed,
        "peak_bytes": peak,
        "sample": samples[0]["text"],
        "prompt": samples[0]["prompt"],
        "samples": samples,
        "chat_template_applied": templated,
    }


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
_USER_ERRORS = ("ValueError: ", "FileNotFoundError: ", "destila.cache.reader.CorruptShardError: ")


def evaluate_models(models: list[str], *, isolated: bool = True, timeout: float | None = None,
                    progress: bool = False, **options) -> list[dict]:
    """:func:`evaluate_model` for each model, each in a fresh process when ``isolated`` (for its peak memory).

    ``progress``: show a progress bar per model (its stage, batches scored, elapsed time) on the terminal.
    """
    import contextlib
    import tempfile
    from pathlib import Path

    results = []
    with contextlib.ExitStack() as stack:
        bar = stack.enter_context(_progress_bar()) if progress and isolated else None
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="destila-eval-")))
        for number, model in enumerate(models, start=1):
            if not isolated:
                results.append(evaluate_model(model, **options))
                continue
            state = folder / f"progress-{number}"
            kwargs = {"model": model, **options, **({"progress_file": str(state)} if bar is not None else {})}
            launch = lambda: run_isolated("destila.eval.run:evaluate_model", kwargs,  # noqa: E731
                                          device=options.get("device", "cpu"), timeout=timeout)
            label = f"model {number}/{len(models)} {Path(model).name or model}"
            run = launch() if bar is None else run_with_progress(launch, state, bar, label)
            if run["status"] == "error" and str(run["error"]).startswith(_USER_ERRORS):
                error_type, _, message = str(run["error"]).partition(": ")  # the worker's own one-line message
                raise (FileNotFoundError if error_type == "FileNotFoundError" else ValueError)(message)
            if run["status"] != "ok":
                raise RuntimeError(f"eval: evaluating {model} failed ({run['status']}): {run.get('error')}")
            results.append(run["result"])
    return results


def _progress_bar():
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    return Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn())
