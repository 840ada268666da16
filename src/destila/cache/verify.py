"""``verify_cache``: read every shard and check it against the manifest and against itself.

Checks, per shard: the file exists with the recorded size and SHA-256; it
parses as safetensors with the five tensors, dtypes and shapes the manifest
implies; its ``sequence_index`` equals the manifest's; ids lie in
``[0, vocab)``; log-probs are finite, ≤ 0 and sorted descending; the tail
log-mass is finite (``-inf`` only when K = V) and ≤ 0; and each position's
stored mass ``logsumexp(topk_logprobs, tail_logmass)`` is 0 within what the
storage dtype allows. Across shards: every sequence is stored exactly once and
``complete`` agrees (:mod:`~destila.cache.coverage`). The tokenizer files match the
digests recorded at build time (:mod:`~destila.cache.tokenizer_files`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from destila.cache.format import (
    MANIFEST,
    TOKENIZER_DIR,
    is_shard_file,
    is_temporary,
    read_manifest,
    sha256_file,
)
from destila.cache.coverage import coverage_faults
from destila.cache.tokenizer_files import tokenizer_faults

# |log Σp| a position may show from rounding its K log-probs to the storage
# dtype: about entropy × 2^-mantissa_bits (entropy ≤ ~10 nats), with margin.
MASS_TOLERANCE = {"float32": 1e-3, "float16": 1e-2, "bfloat16": 1e-1}
_SLACK = 1e-3  # log-probs are ≤ 0 up to float rounding of "top logit − logsumexp"


@dataclass
class VerifyReport:
    """Result of :func:`verify_cache`; ``ok`` when complete and without faults."""

    path: Path
    complete: bool
    sequences: int
    stored_sequences: int
    shards_checked: int = 0
    faults: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    max_mass_error: float = 0.0

    @property
    def ok(self) -> bool:
        return self.complete and not self.faults


def verify_cache(path: str | Path) -> VerifyReport:
    """Check every shard of the cache at ``path``; never raises for a damaged shard, reports it."""
    path = Path(path).expanduser()
    manifest = read_manifest(path)
    report = VerifyReport(path, manifest.complete, manifest.sequences, manifest.stored_sequences)
    if not manifest.complete:
        report.faults.append(
            f"{MANIFEST}: incomplete, {manifest.stored_sequences} of {manifest.sequences} sequences stored; "
            "run the same `destila cache build` command again to finish it"
        )
    report.faults.extend(tokenizer_faults(path, manifest.tokenizer_files))
    if not manifest.tokenizer_files:
        report.warnings.append(f"{TOKENIZER_DIR}/: no digests in the manifest (built by an older destila); not checked")
    report.faults.extend(coverage_faults(manifest))
    for shard in manifest.shards:
        faults = _check_shard(path, manifest, shard, report)
        report.faults.extend(f"{shard.name}: {fault}" for fault in faults)
        report.shards_checked += 1
    named = {s.name for s in manifest.shards}
    for item in sorted(path.iterdir()):
        if (is_shard_file(item.name) and item.name not in named) or is_temporary(item.name):
            report.warnings.append(f"{item.name}: not named in the manifest (left by an interrupted build; ignored)")
    return report


def _check_shard(path: Path, manifest, shard, report: VerifyReport) -> list[str]:
    import numpy as np
    import torch

    file = path / shard.name
    if not file.is_file():
        return ["file missing"]
    size = file.stat().st_size
    if size != shard.bytes:
        return [f"size {size} bytes, the manifest says {shard.bytes}"]
    digest = sha256_file(file)
    if digest != shard.sha256:
        return [f"checksum mismatch (manifest sha256 {shard.sha256[:16]}…, file {digest[:16]}…): the file is damaged"]
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(file))
    except Exception as err:  # safetensors' own error type; the checksum matched, so the writer was wrong
        return [f"not a readable safetensors file ({err})"]
    rows, length, k = shard.rows, manifest.seq_len, manifest.top_k
    expected = {
        "sequence_index": (torch.int64, (rows,)),
        "input_ids": (torch.int32, (rows, length)),
        "topk_ids": (torch.int32, (rows, length, k)),
        "topk_logprobs": (getattr(torch, manifest.logprob_dtype), (rows, length, k)),
        "tail_logmass": (torch.float32, (rows, length)),
    }
    faults = []
    for name, (dtype, shape) in expected.items():
        tensor = tensors.get(name)
        if tensor is None:
            faults.append(f"tensor {name} missing")
        elif tensor.dtype != dtype or tuple(tensor.shape) != shape:
            faults.append(f"tensor {name} is {tensor.dtype} {tuple(tensor.shape)}, expected {dtype} {shape}")
    if faults:
        return faults
    if not np.array_equal(tensors["sequence_index"].numpy(), shard.indices()):
        faults.append("sequence_index differs from the manifest")
    ids, lp, tail = tensors["topk_ids"], tensors["topk_logprobs"].float(), tensors["tail_logmass"]
    if ids.min() < 0 or ids.max() >= manifest.vocab_size:
        faults.append(f"topk_ids outside [0, {manifest.vocab_size})")
    inputs = tensors["input_ids"]
    if inputs.min() < 0 or inputs.max() >= manifest.vocab_size:
        faults.append(f"input_ids outside [0, {manifest.vocab_size})")
    if not torch.isfinite(lp).all():
        faults.append(f"{int((~torch.isfinite(lp)).sum())} non-finite top-K log-probs")
    elif lp.max() > _SLACK:
        faults.append(f"top-K log-probs above 0 (max {lp.max().item():.3g})")
    elif (lp[..., 1:] > lp[..., :-1]).any():
        faults.append("top-K log-probs not sorted in descending order")
    bad_tail = ~torch.isfinite(tail)
    if k == manifest.vocab_size:  # nothing is left out: the tail's log-mass is log 0
        bad_tail &= ~torch.isneginf(tail)
    if bad_tail.any():
        faults.append(f"{int(bad_tail.sum())} non-finite tail log-masses")
    elif tail.max() > _SLACK:
        faults.append(f"tail log-mass above 0 (max {tail.max().item():.3g})")
    if not faults:
        mass = torch.logsumexp(torch.cat([lp, tail[..., None]], dim=-1), dim=-1).abs().max().item()
        report.max_mass_error = max(report.max_mass_error, mass)
        if mass > MASS_TOLERANCE[manifest.logprob_dtype]:
            faults.append(
                f"stored probabilities do not sum to 1: |log Σp| up to {mass:.3g} "
                f"(> {MASS_TOLERANCE[manifest.logprob_dtype]} for {manifest.logprob_dtype})"
            )
    return faults
