"""The teacher pass: pack the data, run the teacher once, write the cache a :class:`BuildSpec` describes.

Per micro-batch of packed sequences ``[B, L]`` (with their position ids, so
packed documents attend only to themselves): the teacher's decoder gives
hidden states ``[B, L, H]``; only the ``P`` trained positions (loss mask) go
through the output head, chunk by chunk (:func:`~destila.targets.head.teacher_topk`
or :func:`~destila.targets.sampled.teacher_sample`), so the ``[B, L, V]``
logits never exist.
Rows are grouped into shards; each shard is written atomically and then
recorded (in the manifest, or under ``torchrun`` in this rank's progress
file), so a build killed at any instant resumes from its last recorded shard.
With ``tensor_parallel`` the ``torchrun`` processes share one teacher instead
of splitting the sequences: all run every forward, rank 0 alone computes the
targets (with the head gathered whole once) and writes, as a single process would.

Naive equivalent (one process, everything in memory)::

    rows = as_sequences(data, tokenizer, seq_len=seq_len)                     # destila.data
    batch = rows.rows(range(len(rows)))                                       # input_ids, position_ids, loss_mask
    logits = model(batch["input_ids"], position_ids=batch["position_ids"], use_cache=False).logits
    logp = torch.log_softmax(logits.float() / temperature, -1)[batch["loss_mask"]]   # trained positions only
    topk_logprobs, topk_ids = logp.topk(k, -1)
    tail_logmass = logp.scatter(-1, topk_ids, -inf).logsumexp(-1)
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

from destila import __version__
from destila.cache import distributed
from destila.cache.assemble import assemble_shard, write_shard
from destila.cache.encodings import encoding_of
from destila.cache.extras import load_teacher_set
from destila.cache.format import (
    FORMAT_VERSION,
    Manifest,
    ShardInfo,
    read_manifest,
    write_manifest,
)
from destila.cache.checks.identity import cache_identity
from destila.cache.kinds import kind_of, target_content
from destila.cache.resume import (
    covers_all,
    done_indices,
    existing_manifest,
    lock_folder,
    release_folder,
    recover,
    refuse_different,
    undo_empty_build,
    write_progress,
)
from destila.cache.spec import BuildSpec
from destila.cache.tokenizer_files import copy_tokenizer
from destila.data.sequences import as_sequences, describe_data
from destila.io import names_user_path
from destila.io.progress import progress_bar
from destila.models import (
    check_plain_head,
    config_hash,
    decoder_of,
    load_causal_lm,
    load_tokenizer,
    output_head,
    resolve_source,
    tokenizer_fingerprint,
    weight_fingerprint,
)
from destila.models.placement import check_tensor_parallel, head_weights, input_device, resolve_device
from destila.targets.spec import TargetSpec

log = logging.getLogger("destila.cache")

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
    # Trained positions of the data no sequence trains, by reason (destila.data.PackedSource.dropped_positions).
    dropped: dict = field(default_factory=dict)

    @property
    def pass_seconds(self) -> float:
        return self.forward_seconds + self.head_seconds + self.write_seconds

    @property
    def tokens_per_second(self) -> float:
        return self.written_tokens / self.pass_seconds if self.pass_seconds else 0.0


def build_cache(spec: BuildSpec | str, data=None, output=None, **options) -> BuildReport:
    """Run the teacher once over the data and store its targets in the cache folder ``spec`` describes.

    ``build_cache(BuildSpec(teacher, data, output, ...))``, or with flat
    keyword options (target fields among them) ``build_cache(teacher, data,
    output, top_k=…, seq_len=…)`` (see :meth:`BuildSpec.from_options`).
    Resumes an interrupted build of the same spec; refuses (``ValueError``)
    an existing cache built with a different one. Under ``torchrun`` the
    ranks deal the shards among themselves (:func:`shard_blocks`): W
    processes write the shard files and manifest of one process, with the
    same micro-batches, so byte for byte on the same kind of device and
    thread count. With ``tensor_parallel`` every rank runs every sequence on
    its slice of the teacher and rank 0 writes.
    """
    if not isinstance(spec, BuildSpec):
        spec = BuildSpec.from_options(spec, data, output, **options)
    elif data is not None or output is not None or options:
        raise ValueError("build_cache: pass either a BuildSpec or (teacher, data, output, **options), not both")
    output = spec.output
    if spec.tensor_parallel:  # before joining a process group or reading any data
        check_tensor_parallel(spec.device, int(os.environ.get("WORLD_SIZE", "1")))
    group, device = distributed.join(resolve_device(spec.device))
    # The folder's lock once _prepare takes it (released here even when _prepare fails), and whether this build
    # wrote the folder's manifest.
    held: dict = {}
    created = not output.exists()
    try:
        manifest, source, model, teachers = _prepare(group, spec, device, held)
        report = BuildReport(
            output, manifest.sequences, manifest.tokens, manifest.complete,
            rank=group.rank, world_size=group.world, dropped=source.dropped_positions(),
        )
        if manifest.complete:
            report.nothing_to_do = True
            return report
        done = done_indices(manifest)
        report.already_stored = len(done)
        # Tensor-parallel ranks hold one teacher between them: each runs every block.
        blocks = shard_blocks(manifest.sequences, done, spec.shard_size)
        my_blocks = blocks if spec.tensor_parallel else blocks[group.rank :: group.world]
        _teacher_pass(model, teachers, source, my_blocks, manifest, spec, group, report)
        distributed.barrier(group)
        if group.world > 1 and group.is_main:  # the other ranks' shards, from their progress files
            manifest = recover(output, manifest)
        distributed.barrier(group)
        report.complete = (manifest if group.is_main else read_manifest(output)).complete
        return report
    except BaseException:
        held["failed"] = True
        if held.get("fresh") and group.is_main:  # a refused new cache leaves nothing that blocks the next build
            undo_empty_build(output, created)
        raise
    finally:
        if "lock" in held:
            release_folder(output, held["lock"])
        if held.get("failed") and created and group.is_main and output.is_dir() and not any(output.iterdir()):
            output.rmdir()  # refused before its manifest (a teacher that cannot load): the folder it made goes too
        distributed.leave(group)


def shard_blocks(sequences: int, done: set[int], shard_size: int) -> list[list[int]]:
    """The shards left to write: block b holds the sequences of ``[b*shard_size, (b+1)*shard_size)`` not in ``done``.

    Empty blocks are dropped; rank r of W computes the blocks r, r+W, r+2W, …
    of this list. A fresh build's blocks are those of one process whatever W,
    and so are a resume's when every stored shard is a whole block (the shard
    size unchanged): a killed build, resumed with any number of processes,
    writes the shards of an uninterrupted one, and the ranks still get an even
    share (±1 block) when the kill left them unequally advanced.
    """
    blocks = ([i for i in range(start, min(start + shard_size, sequences)) if i not in done]
              for start in range(0, sequences, shard_size))
    return [block for block in blocks if block]


def _content(spec: BuildSpec, tokenizer, source, data_fingerprint: str) -> dict:
    """The manifest's content fields a build decides before loading the teacher (``compact`` and ``extras``,
    which depend on the teacher, are set once it is loaded)."""
    return dict(
        format_version=FORMAT_VERSION, tokenizer_fingerprint=tokenizer_fingerprint(tokenizer),
        targets=asdict(spec.targets), encoding=spec.encoding, compact=None, seq_len=source.spec.seq_len,
        logprob_dtype=spec.logprob_dtype, text_field=source.spec.text_field, max_tokens=source.spec.max_tokens,
        data_fingerprint=data_fingerprint, ids_fingerprint=source.fingerprint, sequences=len(source),
        extras=spec.extras.record(), spans=spec.spans,
    )


@dataclass
class _Plan:
    """What a build will store, decided from the tokenizer and the data alone (before the teacher loads)."""

    tokenizer: object
    source: object  # the packed sequences (destila.data.PackedSource)
    description: str  # the data source as the manifest records it
    fields: dict  # _content's fields
    context: dict  # where the inputs came from, named beside a refused difference

    def early_content(self) -> dict:
        """The content fields (flattened as :meth:`Manifest.content` is) that are compared before loading."""
        flat = {k: v for k, v in self.fields.items() if k not in _TEACHER_FIELDS and k != "targets"}
        flat.update({f"targets.{k}": v for k, v in target_content(TargetSpec(**self.fields["targets"])).items()})
        return flat


# Content fields known only once the teacher is loaded: the layout of the compact encoding depends on its
# vocabulary, and the extras record its fingerprints and hidden widths.
_TEACHER_FIELDS = ("compact", "extras")


def _plan(group, spec: BuildSpec) -> _Plan:
    """Tokenise and pack the data (rank 0 first), and decide the content it gives."""
    tokenizer = load_tokenizer(spec.teacher, spec.gguf_file)
    source = as_sequences(spec.data, tokenizer, main_first=lambda: distributed.main_first(group), spans=spec.spans)
    description = describe_data(spec.data, source)
    return _Plan(tokenizer, source, description, _content(spec, tokenizer, source, source.store.fingerprint),
                 {"data_source": description, "teacher": str(spec.teacher)})


def _on_main(group, work):
    """``work()`` on rank 0 (its result, None elsewhere); a refusal there is raised on every rank."""
    result, error = None, None
    if group.is_main:
        try:
            result = work()
        except (ValueError, OSError) as err:
            error = err
    distributed.share_error(group, error)
    return result


def _claim_folder(group, spec: BuildSpec, plan: _Plan, held: dict) -> Manifest | None:
    """Lock the output folder (rank 0) and refuse a cache there whose planned content differs; returns the
    manifest it already holds (None for a new cache, and on the other ranks).

    Called before the teacher loads, which may take minutes.
    """
    def claim():
        held["lock"] = lock_folder(spec.output)
        old = existing_manifest(spec.output)
        if old is not None:
            refuse_different(old, plan.early_content(), spec.output, plan.context)
        return old

    return _on_main(group, claim)


def _prepare(group, spec: BuildSpec, device, held: dict):
    """Load everything, agree with what the output folder already holds; returns ``(manifest, source, model,
    teachers)``, ``teachers`` the :class:`~destila.cache.extras.TeacherSet` of a mixture or stored hidden states
    (else None)."""
    plan = _plan(group, spec)
    old = _claim_folder(group, spec, plan, held)
    model, teachers, manifest = _load_teacher(spec, plan, device)
    return _open_cache(group, spec, plan, old, manifest, held), plan.source, model, teachers


def _load_teacher(spec: BuildSpec, plan: _Plan, device):
    """The teacher (checked against the data), its :class:`~destila.cache.extras.TeacherSet` or None, and the
    manifest of the cache it makes."""
    # heavy: torch, only when the teacher is loaded
    import torch

    torch_dtype = None if spec.dtype == "auto" else getattr(torch, spec.dtype)
    if not spec.progress:
        # transformers takes seconds to import: only when a teacher is loaded
        import transformers

        transformers.utils.logging.disable_progress_bar()  # its weight-loading bar, in logs, is noise
    model = load_causal_lm(spec.teacher, gguf_file=spec.gguf_file, device=device, dtype=torch_dtype,
                           device_map=spec.device_map, max_memory=spec.max_memory, offload_folder=spec.offload_folder,
                           tensor_parallel=spec.tensor_parallel)
    check_plain_head(model)
    _check_fits(model, plan.source, spec)
    vocab_size = int(output_head(model)[0].shape[0])
    fields = dict(plan.fields, compact=encoding_of(spec.encoding).layout_record(vocab_size))
    teachers = None
    if spec.extras.active:  # several teachers, or hidden states: the pass goes through a TeacherSet
        teachers, fields["extras"] = load_teacher_set(spec, model, plan.tokenizer, device, torch_dtype)
    path, gguf = resolve_source(spec.teacher, spec.gguf_file)
    tokenizer, source = plan.tokenizer, plan.source
    manifest = Manifest(
        teacher=str(spec.teacher), teacher_path=path, teacher_gguf_file=gguf,
        teacher_architecture=type(model).__name__, teacher_config_hash=config_hash(model),
        teacher_weight_fingerprint=weight_fingerprint(model),
        teacher_dtype=str(next(model.parameters()).dtype).removeprefix("torch."),
        tokenizer_size=len(tokenizer), eos_token_id=int(tokenizer.eos_token_id), vocab_size=vocab_size,
        data_source=plan.description, tokens=len(source) * source.spec.seq_len, destila_version=__version__,
        data=source.spec.describe() if hasattr(source, "spec") else None, **fields,
    )
    manifest.identity = cache_identity(manifest)  # every shard carries it (a resumed cache keeps its own)
    return model, teachers, manifest


def _open_cache(group, spec: BuildSpec, plan: _Plan, old: Manifest | None, manifest: Manifest, held: dict):
    """The manifest to write into: ``manifest`` written as a new cache's, or ``old`` (once its teacher-dependent
    fields agree, the rest compared by :func:`_claim_folder`) recovered from a killed build."""
    output = spec.output

    def open_on_main():
        if old is None:
            held["fresh"] = True
            write_manifest(output, manifest)  # first, so a half-made folder is still recognised as ours
            current = manifest
        else:
            early = plan.early_content()
            refuse_different(old, {k: v for k, v in manifest.content().items() if k not in early}, output,
                             plan.context)
            current = old
        current.tokenizer_files = copy_tokenizer(plan.tokenizer, output, current.tokenizer_files)
        recovered = recover(output, current)
        if old is not None and recovered.stored_sequences and not recovered.complete:
            log.info("resuming %s: %d of %d sequences already stored", output, recovered.stored_sequences,
                     recovered.sequences)
        return recovered

    opened = _on_main(group, open_on_main)
    distributed.barrier(group)
    return opened if group.is_main else read_manifest(output)


def _check_ids(model, input_ids) -> None:
    embeddings = model.get_input_embeddings().num_embeddings
    largest = int(input_ids.max())
    if largest >= embeddings:
        raise ValueError(
            f"tokenizer: produces token id {largest} but the teacher has {embeddings} input embeddings; "
            "the tokenizer does not belong to this model"
        )


def _check_fits(model, source, spec: BuildSpec) -> None:
    config, seq_len = model.config, source.spec.seq_len
    for attr in _CONTEXT_ATTRS:
        context = getattr(config, attr, None)
        if isinstance(context, int) and context > 0:
            if seq_len > context:
                raise ValueError(
                    f"seq_len: {seq_len} is longer than the teacher's context of {context} tokens "
                    f"(config.{attr}); pass --seq-len {context} or less"
                )
            break
    vocab = model.get_output_embeddings().weight.shape[0]
    kind_of(spec.targets.kind).check_vocab(spec.targets, vocab)


def _teacher_pass(model, teachers, source, groups: list[list[int]], manifest, spec: BuildSpec, group,
                  report) -> None:
    """Compute and write the shards ``groups`` (each a list of sequence indices), recording each once written.

    ``teachers``: a :class:`~destila.cache.extras.TeacherSet` computing the targets in ``model``'s place, or None.
    """
    # heavy: torch, only for the teacher pass
    import torch

    decoder = decoder_of(model)
    # A device-mapped teacher may keep its head on CPU or disk between uses.
    device, output, seq_len = input_device(model), spec.output, manifest.seq_len
    # Tensor parallel: rank 0 writes as a single process would; the others only take part in the forwards.
    alone, writes = group.world == 1 or spec.tensor_parallel, group.is_main or not spec.tensor_parallel
    bar = progress_bar(
        sum(map(len, groups)) * seq_len, unit="tok", unit_scale=True, dynamic_ncols=True,
        desc="teacher pass" if alone else f"teacher pass (rank 0 of {group.world})",
        show=spec.progress and group.is_main,
    )
    written: list[ShardInfo] = []
    gathered = None
    if spec.tensor_parallel:  # the head is split by vocabulary: gathered once, for the full-vocabulary top-K
        with head_weights(model) as (weight, bias):
            gathered = (weight, bias) if writes else None
    with bar, torch.inference_mode():
        for number, sequences in enumerate(groups, 1):
            rows = []
            for start in range(0, len(sequences), spec.batch_size):
                batch = sequences[start : start + spec.batch_size]
                items = [source[i] for i in batch]
                stacked = {key: torch.stack([item[key] for item in items]) for key in items[0]}
                _check_ids(model, stacked["input_ids"])
                began = time.perf_counter()
                if teachers is not None:
                    targets = teachers.positions(stacked["input_ids"].to(device), stacked["loss_mask"],
                                                 position_ids=stacked["position_ids"].to(device))
                    report.forward_seconds += time.perf_counter() - began  # forward and head, not told apart
                    rows.extend(_split_rows(batch, items, targets))
                    bar.update(len(batch) * seq_len)
                    continue
                hidden = decoder(input_ids=stacked["input_ids"].to(device),
                                 position_ids=stacked["position_ids"].to(device), use_cache=False).last_hidden_state
                if not writes:
                    continue
                _sync(device)
                middle = time.perf_counter()
                mask = stacked["loss_mask"]
                with nullcontext(gathered) if gathered else head_weights(model) as (weight, bias):
                    targets = _head(hidden[mask.to(hidden.device)].to(weight.device), weight, bias, manifest, spec,
                                    batch, mask)
                _sync(device)
                report.forward_seconds += middle - began
                report.head_seconds += time.perf_counter() - middle
                rows.extend(_split_rows(batch, items, targets))
                bar.update(len(batch) * seq_len)
            if not writes:
                continue
            began = time.perf_counter()
            info = write_shard(output, assemble_shard(manifest, rows), sequences, lambda w: _durable(output, w),
                               manifest.identity)
            written.append(info)
            if alone:
                manifest.shards.append(info)
                manifest.shards.sort(key=lambda shard: shard.name)  # same manifest whatever the order of work
                manifest.complete = covers_all(manifest)
                _durable(output, lambda: write_manifest(output, manifest))
            else:
                _durable(output, lambda: write_progress(output, group.rank, written))
            report.write_seconds += time.perf_counter() - began
            report.written_sequences += len(sequences)
            report.written_tokens += len(sequences) * seq_len
            if not (spec.progress and group.is_main):
                log.info("shard %d/%d written (%s): %d sequences, %.0f tok/s", number, len(groups), info.name,
                         len(sequences), report.tokens_per_second)


def _head(hidden, weight, bias, manifest, spec: BuildSpec, sequences, mask) -> dict:
    """The targets of the trained positions ``hidden [P, H]`` of ``sequences`` (``mask [B, L]``), on the CPU."""
    return kind_of(spec.targets.kind).teacher_head(hidden, weight, bias, spec.targets, sequences, mask, manifest)


def _split_rows(sequences, items, targets: dict) -> list[dict]:
    """Per-sequence rows (:mod:`destila.cache.assemble`) from a batch's flat targets over its trained positions."""
    rows, at = [], 0
    for index, item in zip(sequences, items):
        count = int(item["loss_mask"].sum())
        row = {"sequence_index": index, **item}
        row.update({key: value[at : at + count] for key, value in targets.items()})
        rows.append(row)
        at += count
    return rows


def _durable(output: Path, write) -> None:
    """Run ``write``; turn an OS error (full disk, permissions) into a message that says what is safe."""
    with names_user_path(output, "could not write to the cache folder {root}: {reason}. Every shard recorded in its "
                         "manifest is intact; free space or fix permissions, then run the same command again to resume"):
        write()


def _sync(device) -> None:
    if getattr(device, "type", str(device)).startswith("cuda"):
        # heavy: torch, only on CUDA
        import torch

        torch.cuda.synchronize(device)

