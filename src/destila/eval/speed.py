"""Speed and size of a model: forward and generation throughput, bytes on disk."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import torch


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
def generate(model, tokenizer, prompt: str, new_tokens: int, templated: bool = False) -> tuple[str, float]:
    """Greedy continuation of ``prompt`` and the generation speed in new tokens/s.

    ``templated``: ``prompt`` is already rendered by the chat template, which
    placed its own special tokens, so the tokenizer adds none.
    """
    inputs = tokenizer(prompt, return_tensors="pt", add_special_tokens=not templated).to(model.device)
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


