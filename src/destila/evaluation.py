"""Side-by-side evaluation of models on held-out data.

For every model: perplexity and next-token accuracy on the data; KL to the
teacher and top-1 agreement with it (the top-K bucket KL from a cache, or the
full-vocabulary KL when the teacher itself is given); parameters, size on
disk, forward and generation throughput, and peak memory. Each model is
evaluated in its own process (:func:`destila.bench.isolated.run_isolated`),
so its peak memory is its own.
"""

from __future__ import annotations

import math
import statistics
import time
from pathlib import Path

import torch

from destila.losses import distill_loss
from destila.models import decoder_of, load_causal_lm, load_tokenizer, output_head
from destila.training.datasets import collate, next_token_labels
from destila.training.online import full_vocab_divergence

DEFAULT_PROMPT = "The `with` statement in Python"
METRICS = (  # key, label, format, show the ratio to the first model
    ("perplexity", "perplexity", "{:.2f}", True),
    ("accuracy", "next-token accuracy", "{:.1%}", True),
    # Against itself the teacher's KL is 0 (up to float16 rounding): no ratio.
    ("kl_to_teacher", "KL to teacher (nats/token)", "{:.4f}", False),
    ("top1_agreement", "top-1 agreement with teacher", "{:.1%}", True),
    ("parameters", "parameters", "{:,.0f}", True),
    ("size_bytes", "size on disk (MB)", "{:.1f}", True),
    ("forward_tokens_per_second", "forward (tokens/s)", "{:,.0f}", True),
    ("generate_tokens_per_second", "generation (new tokens/s)", "{:,.1f}", True),
    ("peak_bytes", "peak memory (MB)", "{:,.0f}", True),
)


@torch.no_grad()
def quality_sums(model, batches, teacher=None, chunk_size: int = 2048) -> dict:
    """Sums over the rows with a label, for ``batches`` of ``input_ids [B, L]``
    (plus the cache's top-K fields when evaluating against a cache).

    Returns ``rows``, ``nll`` (Σ −log q(label)), ``correct`` (argmax = label)
    and, against a teacher or a cache, ``kl`` (Σ forward KL: over the full
    vocabulary when ``teacher`` is given, else over the cache's top-K
    buckets) and ``agree`` (argmax = teacher's top-1). Naive
    equivalent: full ``[N, V]`` logits of both models; here only
    ``chunk_size × V`` at a time.
    """
    weight, bias = output_head(model)
    sums = {"rows": 0.0, "nll": 0.0, "correct": 0.0}
    if teacher is not None or "topk_ids" in batches[0]:
        sums.update(kl=0.0, agree=0.0)
    for batch in batches:
        input_ids = batch["input_ids"]
        labels = next_token_labels(input_ids).flatten()
        hidden = decoder_of(model)(input_ids=input_ids, use_cache=False).last_hidden_state.flatten(0, 1)
        if "topk_ids" in batch and teacher is None:  # with the teacher at hand, its full KL replaces the top-K one
            _, stats = distill_loss(
                hidden, weight, batch["topk_ids"].flatten(0, 1), batch["topk_logprobs"].flatten(0, 1),
                batch["tail_logmass"].flatten(), labels,
                bias=bias, chunk_size=chunk_size, return_stats=True,
            )
            sums["kl"] += stats["soft"].item()
            sums["agree"] += stats["agree"].item()
        if teacher is not None:
            t_weight, t_bias = output_head(teacher)
            t_hidden = decoder_of(teacher)(input_ids=input_ids, use_cache=False).last_hidden_state.flatten(0, 1)
        for start in range(0, hidden.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            valid = labels[rows] != -100
            logits = _logits(hidden[rows], weight, bias)[valid]
            target = labels[rows][valid]
            sums["rows"] += float(valid.sum())
            sums["nll"] += torch.nn.functional.cross_entropy(logits, target, reduction="sum").item()
            sums["correct"] += float((logits.argmax(-1) == target).sum())
            if teacher is not None:
                t_logits = _logits(t_hidden[rows], t_weight, t_bias)[valid]
                sums["kl"] += full_vocab_divergence(logits, t_logits, "forward_kl").sum().item()
                sums["agree"] += float((logits.argmax(-1) == t_logits.argmax(-1)).sum())
    return sums


def _logits(hidden, weight, bias):
    logits = hidden.float() @ weight.float().T
    return logits if bias is None else logits + bias.float()


def metrics_from_sums(sums: dict) -> dict:
    rows = max(sums["rows"], 1.0)
    metrics = {"tokens": int(sums["rows"]), "perplexity": math.exp(sums["nll"] / rows),
               "cross_entropy": sums["nll"] / rows, "accuracy": sums["correct"] / rows}
    if "kl" in sums:
        metrics.update(kl_to_teacher=sums["kl"] / rows, top1_agreement=sums["agree"] / rows)
    return metrics


def _median_seconds(run, repeats: int) -> float:
    run()  # warm-up: allocator, thread pools, first-call paths
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.no_grad()
def forward_tokens_per_second(model, input_ids, repeats: int = 3) -> float:
    """Tokens/s of an ordinary inference forward (logits included) over ``input_ids [B, L]``."""
    return input_ids.numel() / _median_seconds(lambda: model(input_ids=input_ids, use_cache=False), repeats)


@torch.no_grad()
def generate(model, tokenizer, prompt: str, new_tokens: int) -> tuple[str, float]:
    """Greedy continuation of ``prompt`` and the generation speed in new tokens/s."""
    inputs = tokenizer(prompt, return_tensors="pt").to(model.device)
    options = dict(do_sample=False, pad_token_id=tokenizer.eos_token_id)
    model.generate(**inputs, max_new_tokens=2, **options)  # warm-up
    start = time.perf_counter()
    output = model.generate(**inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, **options)
    seconds = time.perf_counter() - start
    return tokenizer.decode(output[0, inputs.input_ids.shape[1]:], skip_special_tokens=True), new_tokens / seconds


def size_on_disk(path: str | Path) -> int:
    """Bytes of the weight files in a model folder (0 for a hub id)."""
    folder = Path(path)
    if not folder.is_dir():
        return folder.stat().st_size if folder.is_file() else 0
    return sum(f.stat().st_size for f in folder.iterdir() if f.suffix in (".safetensors", ".bin", ".gguf", ".pt"))


def evaluate_model(
    model: str, *, cache: str | None = None, indices: list[int] | None = None, data: str | list[str] | None = None,
    teacher: str | None = None, seq_len: int = 512, max_tokens: int | None = 16384, text_field: str = "text",
    batch_size: int = 4, chunk_size: int = 2048, prompt: str = DEFAULT_PROMPT, new_tokens: int = 32,
    device: str = "cpu",
) -> dict:
    """Every metric of one model (see the module docstring); a JSON-able dict.

    Data: ``cache`` (its sequences ``indices``, or all of them) or ``data``
    (texts packed into ``seq_len`` tokens with the model's tokenizer), up to
    ``max_tokens`` tokens. ``teacher`` adds the full-vocabulary KL and
    agreement. ``peak_bytes`` is the model's own peak (weights, forward,
    generation), taken before any teacher is loaded.
    """
    from destila.bench.isolated import PeakMeter
    from destila.models import resolve_source

    if (cache is None) == (data is None):
        raise ValueError("eval: give either a cache or data")
    meter = PeakMeter(device)
    lm = load_causal_lm(model, device=device)
    tokenizer = load_tokenizer(model)
    if cache is not None:
        from destila.cache import TopKCache

        source = TopKCache(cache)
        rows = lm.get_output_embeddings().weight.shape[0]
        if rows != source.vocab_size:  # the cache's ids would index past (or short of) the model's head
            raise ValueError(
                f"eval: {model} has a vocabulary of {rows} tokens but the cache at {cache} was made with "
                f"{source.vocab_size}; evaluate on a cache of this model's teacher, or pass --data instead"
            )
        chosen = list(range(len(source))) if indices is None else list(indices)
        if max_tokens is not None:
            chosen = chosen[: max(1, max_tokens // source.seq_len)]
        items = [source[i] for i in chosen]
    else:
        from destila.data import load_texts, pack_documents

        texts = list(data) if isinstance(data, (list, tuple)) else load_texts(data, text_field=text_field)
        items = [{"input_ids": row} for row in pack_documents(texts, tokenizer, seq_len, max_tokens=max_tokens)]
    batches = [{k: v.to(device) for k, v in collate(items[i:i + batch_size]).items()}
               for i in range(0, len(items), batch_size)]
    forward_speed = forward_tokens_per_second(lm, batches[0]["input_ids"])
    sample, generate_speed = generate(lm, tokenizer, prompt, new_tokens)
    if teacher is None:
        sums = quality_sums(lm, batches, None, chunk_size)
        peak = meter.peak()
    else:
        peak = meter.peak()
        sums = quality_sums(lm, batches, load_causal_lm(teacher, device=device), chunk_size)
    path = resolve_source(model)[0]
    return {
        "model": model,
        "path": path,
        **metrics_from_sums(sums),
        "parameters": sum(p.numel() for p in lm.parameters()),
        "size_bytes": size_on_disk(path),
        "forward_tokens_per_second": forward_speed,
        "generate_tokens_per_second": generate_speed,
        "peak_bytes": peak,
        "sample": sample,
        "prompt": prompt,
    }


_USER_ERRORS = ("ValueError: ", "FileNotFoundError: ", "destila.cache.reader.CorruptShardError: ")


def evaluate_models(models: list[str], *, isolated: bool = True, timeout: float | None = None, **options) -> list[dict]:
    """:func:`evaluate_model` for each model, each in a fresh process when ``isolated`` (for its peak memory)."""
    from destila.bench.isolated import run_isolated

    results = []
    for model in models:
        if not isolated:
            results.append(evaluate_model(model, **options))
            continue
        run = run_isolated("destila.evaluation:evaluate_model", {"model": model, **options},
                           device=options.get("device", "cpu"), timeout=timeout)
        if run["status"] == "error" and str(run["error"]).startswith(_USER_ERRORS):
            kind, _, message = str(run["error"]).partition(": ")  # the worker's own one-line message
            raise (FileNotFoundError if kind == "FileNotFoundError" else ValueError)(message)
        if run["status"] != "ok":
            raise RuntimeError(f"eval: evaluating {model} failed ({run['status']}): {run.get('error')}")
        results.append(run["result"])
    return results


def comparison_rows(results: list[dict]) -> list[tuple[str, list[str]]]:
    """``(label, cells)`` per metric: each model's value and its ratio to the first model's."""
    rows = []
    for key, label, fmt, with_ratio in METRICS:
        if not any(r.get(key) is not None for r in results):
            continue
        base = results[0].get(key)
        cells = []
        for result in results:
            value = result.get(key)
            if value is None:
                cells.append("–")
                continue
            shown = value / 1e6 if key in ("size_bytes", "peak_bytes") else value
            cell = fmt.format(shown).replace("-0.0000", "0.0000")
            if with_ratio and result is not results[0] and base not in (None, 0):
                cell += f" (×{value / base:.2f})"
            cells.append(cell)
        rows.append((label, cells))
    return rows


def render_table(results: list[dict], title: str = "destila eval"):
    """A ``rich`` table: metrics as rows, models as columns, ratios to the first model."""
    from rich.table import Table

    table = Table(title=title)
    table.add_column("metric")
    for result in results:
        table.add_column(Path(result["model"]).name or result["model"], justify="right")
    for label, cells in comparison_rows(results):
        table.add_row(label, *cells)
    return table


def markdown_table(results: list[dict]) -> str:
    """The same comparison as :func:`render_table`, as a Markdown table."""
    names = [Path(r["model"]).name or r["model"] for r in results]
    lines = ["| metric | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {label} | " + " | ".join(cells) + " |" for label, cells in comparison_rows(results)]
    return "\n".join(lines)
