"""A cache built with ``--spans``, read in a student's tokenization: cache items on the student's own tokens.

    data = CrossTokenizerCache("cache/", student_tokenizer, map_folder="run/")
    item = data[i]                 # what TopKCache gives, on the student's tokens (length L_s, varies)
    item["input_ids"]              # [L_s]    the student's tokens of the same text
    item["position_ids"]           # [L_s]    restarting at 0 where the teacher's did (each document)
    item["labels"]                 # [L_s]    next student token where its text is trained, else -100
    item["topk_ids"]               # [L_s, K] student ids of the teacher's targets (targets.py), 0 where none
    item["topk_logprobs"]          # [L_s, K] their log-probs, descending, -inf where none
    item["tail_logmass"]           # [L_s]    the rest bucket: unmapped mass and the teacher's tail; 0 where none
    item["align_kind"]             # [L_s]    0 no label, 1 one-to-one, 2 many-to-one, 3 one-to-many,
                                   #          4 many-to-many, 5 unaligned (the row's next token)
    item["label_bytes"]            # [L_s]    bytes of the label's token (0 where none): bits per byte
    loader = DataLoader(data, batch_size=8, collate_fn=destila.data.collate)   # pads to the longest

So :func:`destila.distill_loss` (any impl, every divergence, ``tail="bucket"``)
trains the student on these items as on a cache of its own tokenizer: a row
with no teacher target has no entries and a rest bucket of mass 1 (log 0),
so its divergence is exactly 0 and only its cross-entropy counts.

Each teacher row is cut into blocks where its position ids restart (each
document, and the row's start); a block's text is rebuilt from the teacher
tokens' bytes at their spans, tokenized by the student (a block that starts
or ends inside a UTF-8 character is trimmed to whole characters), aligned by
byte offsets (:mod:`~destila.crosstok.align`), and the teacher's targets
move onto the student rows before one-to-one and many-to-one groups
(:mod:`~destila.crosstok.targets`). The teacher's EOS after a document
becomes the student's EOS. All of it happens once per item, in the dataset
(so in DataLoader workers), never in the training step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from destila.cache.reader import TopKCache
from destila.constants import IGNORE_INDEX
from destila.crosstok.align import align, end_keys, group_alignments
from destila.crosstok.student_tokenizer import load_student_tokenizer
from destila.crosstok.targets import NEG_INF, chain, one_to_one, shared_ids
from destila.crosstok.vocab_map import load_or_build, spell_greedily
from destila.data.collate import shift_labels
from destila.data.spans import SpanError

# The alignment shapes: a student row's ``align_kind`` code (the shape of its next token's group) indexes them,
# and coverage reports use the same names.
ALIGNMENTS = ("none", "one_to_one", "many_to_one", "one_to_many", "many_to_many", "unaligned")
NONE, ONE_TO_ONE, MANY_TO_ONE, ONE_TO_MANY, MANY_TO_MANY, UNALIGNED = range(6)


def require_bucket_tail(tail: str) -> None:
    """Refuse a loss without the rest bucket: the unmapped teacher mass lives there (one line, for the trainer)."""
    if tail != "bucket":
        raise ValueError(f"tail: a student with another tokenizer gets the teacher's unmapped mass in the rest bucket, "
                         f"which only tail='bucket' has; found {tail!r}; pass --tail bucket")


def no_spans_message(path) -> str:
    return (f"cache: {path} stores no byte spans (built without --spans), so a student with another tokenizer cannot "
            "be aligned to it; rebuild it with the same `destila cache build` command plus --spans into a new folder")


@dataclass
class Aligned:
    """One sequence in the student's tokens (``item``) and its alignment counts (``stats``: see :meth:`counts`)."""

    item: dict
    stats: dict


def _utf8_cut(raw: bytes) -> tuple[int, int]:
    """``(lead, trail)``: bytes to drop at each end of ``raw`` so that it starts and ends on whole characters."""
    lead = 0
    while lead < min(3, len(raw)) and 0x80 <= raw[lead] <= 0xBF:
        lead += 1
    trail = 0
    for back in range(1, min(4, len(raw) - lead) + 1):
        byte = raw[-back]
        if byte >= 0xC0:  # a lead byte: does its character fit?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            trail = back if need > back else 0
            break
        if byte < 0x80:
            break
    return lead, trail


class CrossTokenizerCache(torch.utils.data.Dataset):
    """The cache at ``cache`` (a path or a :class:`~destila.cache.reader.TopKCache`) in ``student_tokenizer``'s tokens.

    ``map_folder``: where the pair's vocabulary map is stored (read when there, else written); ``uld``: items
    also carry ``uld_logprobs [L_s, K]``, the unmapped teacher log-probs of each row (descending), for
    :func:`destila.crosstok.uld_loss`; ``dtype``: of the log-probs (float64 for oracle tests).
    """

    def __init__(self, cache, student_tokenizer, *, map_folder: str | Path | None = None, uld: bool = False,
                 dtype: torch.dtype = torch.float32):
        from transformers import AutoTokenizer  # heavy; the cache itself does not need it

        self.cache = cache if isinstance(cache, TopKCache) else TopKCache(cache)
        if not self.cache.manifest.spans:
            raise ValueError(no_spans_message(self.cache.path))
        if isinstance(student_tokenizer, (str, Path)):
            student_tokenizer = load_student_tokenizer(student_tokenizer)
        self.student_tokenizer = student_tokenizer
        self.teacher_tokenizer = AutoTokenizer.from_pretrained(self.cache.tokenizer_path)
        self.vocab_map = load_or_build(self.teacher_tokenizer, student_tokenizer, map_folder)
        self.width, self.uld, self.dtype = self.cache.top_k, uld, dtype
        self._longest = max(map(len, self.vocab_map.student_index), default=1)
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"dtype: expected torch.float32 or torch.float64, found {dtype}")
        self._numpy_dtype = np.float32 if dtype == torch.float32 else np.float64  # converted in numpy, not torch
        self._shared = shared_ids(self.vocab_map.teacher_to_student, len(student_tokenizer))

    def __len__(self) -> int:
        return len(self.cache)

    def __getitem__(self, index: int) -> dict:
        return self.align(index).item

    def align(self, index: int) -> Aligned:
        """Sequence ``index`` in the student's tokens, with its alignment counts."""
        item = {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in self.cache[index].items()}
        trained = item["labels"] != IGNORE_INDEX
        blocks = self._blocks(item, index)
        texts = [text for text, *_ in blocks]
        encoded = self.student_tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []
        parts, stats = [], _empty_stats()
        for (text, base, rows, lead, trail), ids in zip(blocks, encoded):
            parts.append(self._block(item, trained, rows, (lead, text, trail), base, ids, stats))
        return Aligned(self._assemble(item, trained, parts, stats), stats)

    def _blocks(self, item: dict, index: int) -> list[tuple]:
        """``(text, first byte, teacher rows, lead bytes, trail bytes)`` of each block of the sequence with text:
        the whole characters as text, the bytes of a character cut by the block's edges apart."""
        start, end, positions = item["span_start"], item["span_end"], item["position_ids"]
        table = self.vocab_map.teacher.table
        cuts = np.flatnonzero(positions == 0).tolist()
        cuts = sorted(set([0] + cuts + [len(positions)]))
        blocks = []
        for a, b in zip(cuts[:-1], cuts[1:]):
            rows = np.arange(a, b)[start[a:b] >= 0]
            if not len(rows):
                continue  # padding
            pieces = []
            for row in rows.tolist():
                piece, width = table[int(item["input_ids"][row])], int(end[row] - start[row])
                if width > len(piece):
                    raise ValueError(f"cache: {self.cache.path} sequence {index} position {row}: its byte span is "
                                     f"{width} bytes, its token only {len(piece)}; run `destila cache verify "
                                     f"{self.cache.path}`")
                pieces.append(piece[len(piece) - width :])
            raw = b"".join(pieces)
            lead, trail = _utf8_cut(raw)
            try:
                text = raw[lead : len(raw) - trail].decode("utf-8")
            except UnicodeDecodeError:
                continue  # not text the student can read: its positions stay unaligned
            blocks.append((text, int(start[rows[0]]), rows, raw[:lead], raw[len(raw) - trail :]))
        return blocks

    def _student_tokens(self, pieces: tuple, base: int, ids: list[int], t_ids, t_start, t_end):
        """The student's tokens of one block at their absolute byte spans: its tokenizer's of the text, its
        tokens spelling the bytes of a character the block's edges cut (``pieces``: lead bytes, text, trail
        bytes), and the teacher's zero-width tokens (EOS after a document) mapped, where the student has a
        boundary there."""
        lead, text, trail = pieces
        try:
            s_start, s_end = self.vocab_map.student.spans(text, ids)
        except SpanError as err:
            raise ValueError(f"student tokenizer: {str(err).removeprefix('tokenizer: ')}") from None
        s_ids = np.asarray(ids, np.int64)
        s_start, s_end = s_start + base + len(lead), s_end + base + len(lead)
        for raw, at, before in ((lead, base, True), (trail, base + len(lead) + len(text.encode("utf-8")), False)):
            spelt = spell_greedily(raw, self.vocab_map.student_index, self._longest) if raw else None
            if not spelt:
                continue  # nothing cut, or bytes the student has no token for: left unaligned
            widths = np.asarray([len(self.vocab_map.student.table[i]) for i in spelt], np.int64)
            ends = at + np.cumsum(widths)
            parts = [(np.asarray(spelt, np.int64), ends - widths, ends), (s_ids, s_start, s_end)]
            s_ids, s_start, s_end = (np.concatenate(v) for v in zip(*(parts if before else parts[::-1])))
        zero = np.flatnonzero(t_end == t_start)
        if not len(zero):
            return s_ids, s_start, s_end
        boundaries = set(s_start.tolist()) | set(s_end.tolist()) | {base}
        mapped = self.vocab_map.teacher_to_student[t_ids[zero]]
        keep = [(int(t_start[z]), int(m)) for z, m in zip(zero, mapped) if m >= 0 and int(t_start[z]) in boundaries]
        if not keep:
            return s_ids, s_start, s_end
        at = np.asarray([x for x, _ in keep], np.int64)
        # Text tokens sort by start (key start·2+1), zero-width ones at X before a text token starting at X.
        order = np.argsort(np.concatenate([s_start * 2 + 1, at * 2]), kind="stable")
        return (np.concatenate([s_ids, [m for _, m in keep]])[order], np.concatenate([s_start, at])[order],
                np.concatenate([s_end, at])[order])

    def _block(self, item, trained, rows, pieces, base, ids, stats) -> dict:
        t_ids = item["input_ids"][rows]
        t_start, t_end = item["span_start"][rows], item["span_end"][rows]
        s_ids, s_start, s_end = self._student_tokens(pieces, base, ids, t_ids, t_start, t_end)
        n = len(s_ids)
        groups = align(t_start, t_end, s_start, s_end)
        shapes = group_alignments(groups)
        # The shape of the group each token is in (what the row before it predicts).
        s_shape = _token_alignments(groups.s_count, shapes, n, groups.first_valid)
        t_shape = _token_alignments(groups.t_count, shapes, len(rows), groups.first_valid)
        # Student labels: trained where the teacher token holding the label's first byte is a trained target.
        t_keys, s_keys = end_keys(t_start, t_end), end_keys(s_start, s_end)
        s_begin = np.concatenate([[int(s_start[0]) * 64 if n else 0], s_keys[:-1]])
        holder = np.searchsorted(t_keys, s_begin, side="right")
        t_target = np.zeros(len(rows) + 1, dtype=bool)
        t_target[1 : len(rows)] = trained[rows[:-1]]  # teacher token j is a target when row j-1 is trained
        s_target = t_target[np.minimum(holder, len(rows))] & (holder < len(rows))
        labels = shift_labels(torch.from_numpy(np.where(s_target, s_ids, IGNORE_INDEX).astype(np.int64))).numpy()
        row_shape = np.zeros(n, np.int64)
        row_shape[:-1] = np.where(labels[:-1] != IGNORE_INDEX, s_shape[1:], NONE)
        # Rows that take teacher targets: the last student row before a group with one student token.
        chosen = np.flatnonzero(groups.s_count == 1)
        chosen = chosen[chosen >= 1]
        s_row, t_row, steps = groups.s_first[chosen] - 1, groups.t_first[chosen] - 1, groups.t_count[chosen]
        labelled = labels[s_row] != IGNORE_INDEX
        single = labelled & (steps == 1)
        pairs = [(int(i), int(j), 1) for i, j in zip(s_row[single], t_row[single])]
        for i, j, k in zip(s_row[labelled & ~single].tolist(), t_row[labelled & ~single].tolist(),
                           steps[labelled & ~single].tolist()):
            if not trained[rows[j : j + k]].all() or (t_end[j + 1 : j + k] == t_start[j + 1 : j + k]).any():
                # the teacher stored no target at a row the chain goes through, or a zero-width token is in it
                row_shape[i] = UNALIGNED
                continue
            pairs.append((i, j, k))
        t_rows_trained = trained[rows]
        t_next_shape = np.full(len(rows), UNALIGNED, np.int64)
        t_next_shape[:-1] = t_shape[1:]
        stats["teacher_positions"] += int(t_rows_trained.sum())
        stats["teacher_tokens"] += len(rows)
        for code in range(1, len(ALIGNMENTS)):
            stats["teacher_" + ALIGNMENTS[code]] += int((t_rows_trained & (t_next_shape == code)).sum())
            stats["student_" + ALIGNMENTS[code]] += int((row_shape == code).sum())
        return dict(ids=s_ids, labels=labels, shape=row_shape, pairs=pairs, rows=rows,
                    label_bytes=np.where(labels != IGNORE_INDEX, np.concatenate([(s_end - s_start)[1:], [0]]), 0),
                    text_bytes=int(t_end[-1] - t_start[0]))

    def _assemble(self, item, trained, parts, stats) -> dict:
        width, total = self.width, sum(len(p["ids"]) for p in parts)
        ids = np.zeros((total, width), np.int64)
        logprobs = np.full((total, width), NEG_INF)
        tail = np.zeros(total)
        unmapped = np.full((total, width), NEG_INF)
        ones, at = [], 0
        t_ids, t_lp, t_tail = item["topk_ids"], np.asarray(item["topk_logprobs"], np.float64), item["tail_logmass"]
        mapping = self.vocab_map.teacher_to_student
        for part in parts:
            rows = part["rows"]
            for i, j, k in part["pairs"]:
                if k == 1:
                    ones.append((at + i, rows[j]))
                    continue
                realised = item["input_ids"][rows[j + 1 : j + k]].tolist()
                pieces = [self.vocab_map.teacher.table[t][len(self.vocab_map.teacher.table[t]) - w:]
                          for t, w in zip(realised, (item["span_end"] - item["span_start"])[rows[j + 1 : j + k]])]
                r = rows[j : j + k]
                ids[at + i], logprobs[at + i], tail[at + i], unmapped[at + i] = chain(
                    t_ids[r], t_lp[r], t_tail[r], realised, pieces, self.vocab_map, width)
            at += len(part["ids"])
        if ones:
            student_rows, teacher_rows = (np.asarray(v) for v in zip(*ones))
            out = one_to_one(t_ids[teacher_rows], t_lp[teacher_rows], t_tail[teacher_rows], mapping, self._shared,
                             unmapped=self.uld)
            ids[student_rows], logprobs[student_rows], tail[student_rows] = out[:3]
            if self.uld:
                unmapped[student_rows] = out[3]
        real = trained & (t_lp > NEG_INF).any(axis=1) if len(t_lp) else trained
        probs = np.exp(t_lp[real])
        stats["topk_mass"] += float(probs.sum())
        stats["mapped_mass"] += float((probs * (mapping[t_ids[real]] >= 0)).sum())
        stats["student_rows"] += total
        stats["text_bytes"] += sum(p["text_bytes"] for p in parts)
        cat = lambda key: np.concatenate([p[key] for p in parts]) if parts else np.zeros(0, np.int64)  # noqa: E731
        positions = np.concatenate([np.arange(len(p["ids"])) for p in parts]) if parts else np.zeros(0, np.int64)
        out = {
            "input_ids": torch.from_numpy(cat("ids").astype(np.int64)),
            "position_ids": torch.from_numpy(positions.astype(np.int64)),
            "labels": torch.from_numpy(cat("labels").astype(np.int64)),
            "topk_ids": torch.from_numpy(ids),
            "topk_logprobs": torch.from_numpy(logprobs.astype(self._numpy_dtype)),
            "tail_logmass": torch.from_numpy(tail.astype(self._numpy_dtype)),
            "align_kind": torch.from_numpy(cat("shape").astype(np.int64)),
            "label_bytes": torch.from_numpy(cat("label_bytes").astype(np.int64)),
        }
        if self.uld:
            out["uld_logprobs"] = torch.from_numpy(unmapped.astype(self._numpy_dtype))
        return out


def _token_alignments(count: np.ndarray, shapes: np.ndarray, total: int, first_valid: bool) -> np.ndarray:
    """``[total]`` codes: each token's group shape + 1 (:data:`ALIGNMENTS`); :data:`UNALIGNED` after the last group and in
    an invalid first group. Groups are consecutive from token 0."""
    out = np.full(total, UNALIGNED, np.int64)
    covered = int(count.sum())
    out[:covered] = np.repeat(shapes + 1, count)
    if not first_valid and len(count):
        out[: count[0]] = UNALIGNED
    return out


def _empty_stats() -> dict:
    stats = {"teacher_positions": 0, "teacher_tokens": 0, "topk_mass": 0.0, "mapped_mass": 0.0, "student_rows": 0,
             "text_bytes": 0}
    for name in ALIGNMENTS[1:]:
        stats["teacher_" + name] = 0
        stats["student_" + name] = 0
    return stats
