"""Side-by-side evaluation of models on held-out data.

For every model: perplexity and next-token accuracy on the data; KL to the
teacher and top-1 agreement with it (the top-K bucket KL from a cache, or the
full-vocabulary KL when the teacher itself is given); parameters, size on
disk, forward and generation throughput, and peak memory. Each model is
evaluated in its own process (:func:`destila.eval.measure.run_isolated`),
so its peak memory is its own.
"""

from __future__ import annotations

from destila.cache import TopKCache
from destila.data import DataSpec, collate, packed_source, texts_source
from destila.eval.measure import PeakMeter, run_isolated
from destila.eval.quality import metrics_from_sums, quality_sums
from destila.eval.speed import forward_tokens_per_second, generate, size_on_disk
from destila.losses.options import DEFAULT_CHUNK_SIZE
from destila.models import load_causal_lm, load_tokenizer, resolve_source

DEFAULT_PROMPT = "The `with` statement in Python"


def evaluate_model(
    model: str, *, cache: str | None = None, indices: list[int] | None = None,
    data: str | list[str] | dict | DataSpec | None = None,
    teacher: str | None = None, seq_len: int = 512, max_tokens: int | None = 16384, text_field: str = "text",
    batch_size: int = 4, chunk_size: int = DEFAULT_CHUNK_SIZE, prompt: str = DEFAULT_PROMPT, new_tokens: int = 32,
    device: str = "cpu",
) -> dict:
    """Every metric of one model (see the module docstring); a JSON-able dict.

    Data: ``cache`` (its sequences ``indices``, or all of them) or ``data``
    (a :class:`~destila.data.DataSpec` or its fields as a dict; a source name
    or a list of texts packed into ``seq_len`` tokens), with the model's
    tokenizer, up to ``max_tokens`` tokens. Metrics cover the positions the
    loss mask keeps (assistant turns, completions, whole documents);
    ``tokens`` says how many. ``teacher`` adds the full-vocabulary KL and
    agreement. ``peak_bytes`` is the model's own peak (weights, forward,
    generation), taken before any teacher is loaded.
    """
    if (cache is None) == (data is None):
        raise ValueError("eval: give either a cache or data")
    meter = PeakMeter(device)
    lm = load_causal_lm(model, device=device)
    tokenizer = load_tokenizer(model)
    if cache is not None:
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
        if isinstance(data, (list, tuple)):
            packed = texts_source(list(data), tokenizer, seq_len=seq_len, max_tokens=max_tokens)
        else:
            spec = DataSpec(**data) if isinstance(data, dict) else data
            spec = spec if isinstance(spec, DataSpec) else DataSpec(str(data), text_field=text_field, seq_len=seq_len)
            packed = packed_source(spec.replace(max_tokens=max_tokens or spec.max_tokens), tokenizer)
        items = [packed[i] for i in range(len(packed))]

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


# A worker's failure that is the user's input (its last traceback line): shown as one line, not a crash.
_USER_ERRORS = ("ValueError: ", "FileNotFoundError: ", "destila.cache.reader.CorruptShardError: ")


def evaluate_models(models: list[str], *, isolated: bool = True, timeout: float | None = None, **options) -> list[dict]:
    """:func:`evaluate_model` for each model, each in a fresh process when ``isolated`` (for its peak memory)."""
    results = []
    for model in models:
        if not isolated:
            results.append(evaluate_model(model, **options))
            continue
        run = run_isolated("destila.eval.run:evaluate_model", {"model": model, **options},
                           device=options.get("device", "cpu"), timeout=timeout)
        if run["status"] == "error" and str(run["error"]).startswith(_USER_ERRORS):
            error_type, _, message = str(run["error"]).partition(": ")  # the worker's own one-line message
            raise (FileNotFoundError if error_type == "FileNotFoundError" else ValueError)(message)
        if run["status"] != "ok":
            raise RuntimeError(f"eval: evaluating {model} failed ({run['status']}): {run.get('error')}")
        results.append(run["result"])
    return results


