"""The teacher pass: tokenise and pack the data, run the teacher once, write the top-K cache.

Per micro-batch of packed sequences ``[B, L]``: the teacher's decoder gives
hidden states ``[B·L, H]``; :func:`~destila.cache.topk.teacher_topk` applies
the output head chunk by chunk, so the ``[B, L, V]`` logits never exist.
Rows are grouped into shards; each shard is written atomically and then
recorded (in the manifest, or under ``torchrun`` in this rank's progress
file), so a build killed at any instant resumes from its last recorded shard.

Naive equivalent (one process, everything in memory)::

    packed = pack_documents(load_texts(data), tokenizer, seq_len)
    logp = torch.log_softmax(model(packed).logits.float() / temperature, -1)   # [S, L, V]
    topk_logprobs, topk_ids = logp.topk(k, -1)
    tail_logmass = logp.scatter(-1, topk_ids, -inf).logsumexp(-1)
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from destila.cache import distributed
from destila.cache.format import (
    FORMAT_VERSION,
    LOGPROB_DTYPES,
    Manifest,
    ShardInfo,
    encode_ranges,
    read_manifest,
    shard_name,
    write_atomic,
    write_manifest,
)
from destila.cache.resume import (
    covers_all,
    done_indices,
    existing_manifest,
    lock_folder,
    recover,
    refuse_different,
    write_progress,
)
from destila.cache.tokenizer_files import copy_tokenizer

log = logging.getLogger("destila.cache")

_TEACHER_DTYPES = ("auto", "float32", "bfloat16", "float16")
_CONTEXT_ATTRS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


@dataclass
class BuildReport:
    """What one call of :func:`build_cache` did (on this rank)."""

    path: Path
    sequences: int
    tokens: int
    complete: bool
    nothing_to_do: bool = False
    already_stored: int = 0
    written_sequences: int = 0
    written_tokens: int = 0
    forward_seconds: float = 0.0
    head_seconds: float = 0.0
    write_seconds: float = 0.0
    rank: int = 0
    world_size: int = 1
    notes: list[str] = field(default_factory=list)

    @property
    def pass_seconds(self) -> float:
        return self.forward_seconds + self.head_seconds + self.write_seconds

    @property
    def tokens_per_second(self) -> float:
        return self.written_tokens / self.pass_seconds if self.pass_seconds else 0.0


def build_cache(
    teacher: str,
    data: str | Path | Sequence[str],
    output: str | Path,
    *,
    gguf_file: str | None = None,
    text_field: str = "text",
    seq_len: int = 512,
    max_tokens: int | None = None,
    top_k: int = 100,
    temperature: float = 1.0,
    logprob_dtype: str = "float16",
    batch_size: int = 8,
    device: str = "cpu",
    dtype: str = "auto",
    shard_size: int = 128,
    chunk_size: int = 1024,
    progress: bool = True,
) -> BuildReport:
    """Run ``teacher`` once over ``data`` and store its top-K distributions in ``output``.

    ``teacher`` is anything :func:`destila.models.load_causal_lm` accepts;
    ``data`` anything :func:`destila.data.load_texts` accepts, or a list of
    documents. ``shard_size`` is in sequences; ``chunk_size`` in rows of the
    output head. Resumes an interrupted build of the same arguments; refuses
    (``ValueError``) an existing cache built with different ones. Under
    ``torchrun`` rank r computes the sequences r, r+W, r+2W, … (of those not
    yet stored) and the result does not depend on the number of processes.
    """
    _check_arguments(top_k, temperature, logprob_dtype, batch_size, shard_size, chunk_size, dtype)
    output = Path(output).expanduser()
    group, device = distributed.join(device)
    lock = None
    try:
        lock, manifest, packed, model = _prepare(
            group, teacher, gguf_file, data, text_field, seq_len, max_tokens, top_k, temperature,
            logprob_dtype, device, dtype, output, progress,
        )
        report = BuildReport(
            output, manifest.sequences, manifest.tokens, manifest.complete,
            rank=group.rank, world_size=group.world,
        )
        if manifest.complete:
            report.nothing_to_do = True
            return report
        done = done_indices(manifest)
        report.already_stored = len(done)
        # Round-robin over what is left: r, r+W, r+2W, … on a fresh build, and
        # still an even split when a resume finds the ranks unequally advanced.
        mine = [i for i in range(manifest.sequences) if i not in done][group.rank :: group.world]
        _teacher_pass(model, packed, mine, manifest, output, group, report, batch_size, shard_size, chunk_size, progress)
        distributed.barrier(group)
        if group.world > 1 and group.is_main:
            manifest = recover(output, read_manifest(output))
        distributed.barrier(group)
        report.complete = read_manifest(output).complete
        return report
    finally:
        if lock is not None:
            lock.close()
        distributed.leave(group)


def _check_arguments(top_k, temperature, logprob_dtype, batch_size, shard_size, chunk_size, dtype) -> None:
    if logprob_dtype not in LOGPROB_DTYPES:
        raise ValueError(f"logprob_dtype: expected one of {', '.join(LOGPROB_DTYPES)}, found {logprob_dtype!r}")
    if dtype not in _TEACHER_DTYPES:
        raise ValueError(f"dtype: expected one of {', '.join(_TEACHER_DTYPES)}, found {dtype!r}")
    if not temperature > 0:
        raise ValueError(f"temperature: expected a number > 0, found {temperature}")
    for name, value in (("top_k", top_k), ("batch_size", batch_size), ("shard_size", shard_size), ("chunk_size", chunk_size)):
        if value < 1:
            raise ValueError(f"{name}: expected an integer ≥ 1, found {value}")


def _prepare(group, teacher, gguf_file, data, text_field, seq_len, max_tokens, top_k, temperature,
             logprob_dtype, device, dtype, output, progress):
    """Load everything, agree with what ``output`` already holds; returns ``(lock, manifest, packed, model)``."""
    import torch

    from destila import __version__
    from destila.data import data_fingerprint, ids_fingerprint, load_texts, pack_documents
    from destila.models import (
        check_plain_head, config_hash, load_causal_lm, load_tokenizer, output_head, resolve_source,
        tokenizer_fingerprint, weight_fingerprint,
    )

    tokenizer = load_tokenizer(teacher, gguf_file)
    if isinstance(data, (str, Path)):
        texts, source = load_texts(data, text_field), str(data)
    else:
        texts, source = [t for t in data if t], f"<{len(data)} documents given in Python>"
    packed = pack_documents(texts, tokenizer, seq_len, max_tokens)
    fields = dict(
        format_version=FORMAT_VERSION, tokenizer_fingerprint=tokenizer_fingerprint(tokenizer), top_k=top_k,
        temperature=float(temperature), seq_len=seq_len, logprob_dtype=logprob_dtype, text_field=text_field,
        max_tokens=max_tokens, data_fingerprint=data_fingerprint(texts), ids_fingerprint=ids_fingerprint(packed),
        sequences=packed.shape[0],
    )
    context = {"data_source": source, "teacher": str(teacher)}

    # Refuse a mismatched resume before loading the model, which may take minutes.
    lock, old, error = None, None, None
    if group.is_main:
        try:
            lock = lock_folder(output)
            old = existing_manifest(output)
            if old is not None:
                refuse_different(old, fields, output, context)
        except (ValueError, OSError) as err:
            error = err
    distributed.share_error(group, error)

    torch_dtype = None if dtype == "auto" else getattr(torch, dtype)
    if not progress:
        import transformers

        transformers.utils.logging.disable_progress_bar()  # its weight-loading bar, in logs, is noise
    model = load_causal_lm(teacher, gguf_file=gguf_file, device=device, dtype=torch_dtype)
    check_plain_head(model)
    _check_fits(model, packed, seq_len, top_k)
    weight, _ = output_head(model)
    path, gguf = resolve_source(teacher, gguf_file)
    manifest = Manifest(
        teacher=str(teacher), teacher_path=path, teacher_gguf_file=gguf,
        teacher_architecture=type(model).__name__, teacher_config_hash=config_hash(model),
        teacher_weight_fingerprint=weight_fingerprint(model),
        teacher_dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        tokenizer_size=len(tokenizer), eos_token_id=int(tokenizer.eos_token_id), vocab_size=int(weight.shape[0]),
        data_source=source, tokens=packed.numel(), destila_version=__version__, **fields,
    )
    error = None
    if group.is_main:
        try:
            if old is None:
                write_manifest(output, manifest)  # first, so a half-made folder is still recognised as ours
                old = manifest
            else:
                refuse_different(old, manifest.content(), output, context)
            old.tokenizer_files = copy_tokenizer(tokenizer, output, old.tokenizer_files)
            recovered = recover(output, old)
            if old is not manifest and recovered.stored_sequences and not recovered.complete:
                log.info("resuming %s: %d of %d sequences already stored", output, recovered.stored_sequences,
                         recovered.sequences)
        except (ValueError, OSError) as err:
            error = err
    distributed.share_error(group, error)
    distributed.barrier(group)
    return lock, read_manifest(output), packed, model


def _check_fits(model, packed, seq_len, top_k) -> None:
    config = model.config
    for attr in _CONTEXT_ATTRS:
        context = getattr(config, attr, None)
        if isinstance(context, int) and context > 0:
            if seq_len > context:
                raise ValueError(
                    f"seq_len: {seq_len} is longer than the teacher's context of {context} tokens "
                    f"(config.{attr}); pass --seq-len {context} or less"
                )
            break
    embeddings = model.get_input_embeddings().num_embeddings
    if int(packed.max()) >= embeddings:
        raise ValueError(
            f"tokenizer: produces token id {int(packed.max())} but the teacher has {embeddings} input embeddings; "
            "the tokenizer does not belong to this model"
        )
    vocab = model.get_output_embeddings().weight.shape[0]
    if top_k > vocab:
        raise ValueError(f"top_k: {top_k} is larger than the teacher's vocabulary of {vocab}; pass --top-k {vocab} or less")


def _teacher_pass(model, packed, mine, manifest, output, group, report, batch_size, shard_size, chunk_size, progress):
    import torch
    from tqdm.auto import tqdm

    from destila.models import decoder_of, output_head

    decoder = decoder_of(model)
    weight, bias = output_head(model)
    device = weight.device
    seq_len = manifest.seq_len
    groups = [mine[i : i + shard_size] for i in range(0, len(mine), shard_size)]
    bar = tqdm(
        total=len(mine) * seq_len, unit="tok", unit_scale=True, dynamic_ncols=True,
        desc="teacher pass" if group.world == 1 else f"teacher pass (rank 0 of {group.world})",
        disable=not (progress and group.is_main),
    )
    written: list[ShardInfo] = []
    with bar, torch.inference_mode():
        for number, rows in enumerate(groups, 1):
            tensors = _shard_tensors(len(rows), seq_len, manifest.top_k, manifest.logprob_dtype)
            tensors["sequence_index"] = torch.tensor(rows, dtype=torch.int64)
            tensors["input_ids"] = packed[rows].to(torch.int32)
            for start in range(0, len(rows), batch_size):
                ids = packed[rows[start : start + batch_size]].to(device)
                began = time.perf_counter()
                hidden = decoder(input_ids=ids, use_cache=False).last_hidden_state
                _sync(device)
                middle = time.perf_counter()
                top_ids, top_lp, tail = _head(hidden, weight, bias, manifest, chunk_size, rows[start])
                _sync(device)
                report.forward_seconds += middle - began
                report.head_seconds += time.perf_counter() - middle
                span = slice(start, start + ids.shape[0])
                shape = (ids.shape[0], seq_len, manifest.top_k)
                tensors["topk_ids"][span] = top_ids.view(shape).to(torch.int32).cpu()
                tensors["topk_logprobs"][span] = top_lp.view(shape).to(tensors["topk_logprobs"].dtype).cpu()
                tensors["tail_logmass"][span] = tail.view(shape[:2]).cpu()
                bar.update(ids.numel())
            began = time.perf_counter()
            info = _write_shard(output, tensors, rows)
            written.append(info)
            if group.world == 1:
                manifest.shards.append(info)
                manifest.shards.sort(key=lambda shard: shard.name)  # same manifest whatever the order of work
                manifest.complete = covers_all(manifest)
                _durable(output, lambda: write_manifest(output, manifest))
            else:
                _durable(output, lambda: write_progress(output, group.rank, written))
            report.write_seconds += time.perf_counter() - began
            report.written_sequences += len(rows)
            report.written_tokens += len(rows) * seq_len
            if not (progress and group.is_main):
                log.info("shard %d/%d written (%s): %d sequences, %.0f tok/s", number, len(groups), info.name,
                         len(rows), report.tokens_per_second)


def _head(hidden, weight, bias, manifest, chunk_size, first_sequence):
    import torch

    from destila.cache.topk import teacher_topk

    top_ids, top_lp, tail = teacher_topk(
        hidden.reshape(-1, hidden.shape[-1]), weight, bias, manifest.top_k, manifest.temperature, chunk_size
    )
    if not torch.isfinite(top_lp).all():
        raise ValueError(
            f"teacher: non-finite logits in the batch starting at sequence {first_sequence} "
            f"(teacher dtype {manifest.teacher_dtype}); try --dtype float32"
        )
    return top_ids, top_lp, tail


def _shard_tensors(rows: int, seq_len: int, top_k: int, logprob_dtype: str) -> dict:
    import torch

    return {
        "topk_ids": torch.empty(rows, seq_len, top_k, dtype=torch.int32),
        "topk_logprobs": torch.empty(rows, seq_len, top_k, dtype=getattr(torch, logprob_dtype)),
        "tail_logmass": torch.empty(rows, seq_len, dtype=torch.float32),
    }


def _write_shard(output: Path, tensors: dict, rows: list[int]) -> ShardInfo:
    from safetensors.torch import save

    # One metadata key: safetensors orders several in a random (hash map) order,
    # and equal content must give byte-identical, checksum-identical shards.
    payload = save(tensors, metadata={"format": f"destila-topk-cache/{FORMAT_VERSION}"})
    name = shard_name(rows[0])
    _durable(output, lambda: write_atomic(output / name, payload))
    return ShardInfo(
        name=name, rows=len(rows), sequences=encode_ranges(rows), sha256=hashlib.sha256(payload).hexdigest(),
        bytes=len(payload),
    )


def _durable(output: Path, write) -> None:
    """Run ``write``; turn an OS error (full disk, permissions) into a message that says what is safe."""
    try:
        write()
    except OSError as err:
        raise OSError(
            err.errno,
            f"could not write to the cache folder {output}: {err.strerror or err}. Every shard recorded in its "
            "manifest is intact; free space or fix permissions, then run the same command again to resume",
        ) from err


def _sync(device) -> None:
    if getattr(device, "type", str(device)).startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)

