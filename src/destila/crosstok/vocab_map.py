"""The vocabulary map of a (teacher tokenizer, student tokenizer) pair: teacher id → student id of the same bytes.

Two tokens correspond when they stand for the same bytes once each
tokenizer's spelling is undone (:func:`destila.data.spans.token_bytes_table`:
byte-level ``Ġ``/``Ċ``, SentencePiece ``▁``, ``<0xNN>`` byte fallback, added
tokens as their text). Where a student has several ids for the same bytes
(a byte-fallback token and an ordinary one), the ordinary one is taken, as
its tokenizer would write it. The special tokens with a role take their
role's counterpart instead, whatever their text: the teacher's EOS is the
student's EOS (destila ends every document with it), likewise BOS and pad.
Teacher ids with no counterpart map to -1; their probability mass joins the
rest bucket of the loss. Naive equivalent::

    student = {bytes_of(s): s for s in reversed(range(len(student_tokenizer)))}
    teacher_to_student = [student.get(bytes_of(t), -1) for t in range(len(teacher_tokenizer))]

The map is computed once per pair and stored as ``vocab-map-<teacher
fingerprint>-<student fingerprint>.safetensors`` (:func:`load_or_build`), a
small file keyed by both tokenizers' fingerprints: a changed tokenizer
builds a new one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from destila.data.spans import Speller, check_spells_bytes
from destila.io import write_atomic
from destila.models import tokenizer_fingerprint

MAP_VERSION = 1
_ROLES = ("eos_token_id", "bos_token_id", "pad_token_id", "unk_token_id")
_BYTE_FALLBACK = re.compile(r"<0x[0-9A-Fa-f]{2}>")


@dataclass
class VocabMap:
    """``teacher_to_student [V_teacher]`` int64 (-1: no student token of those bytes) and what it was made from.

    ``teacher`` and ``student`` are the two :class:`~destila.data.spans.Speller` s (bytes of every id),
    ``student_index`` maps bytes to the student id that stands for them; both are rebuilt from the
    tokenizers, never stored.
    """

    teacher_fingerprint: str
    student_fingerprint: str
    teacher_to_student: np.ndarray
    teacher: Speller = field(repr=False)
    student: Speller = field(repr=False)
    student_index: dict[bytes, int] = field(repr=False)
    path: Path | None = None

    @property
    def mapped(self) -> int:
        """Teacher ids with a student counterpart."""
        return int((self.teacher_to_student >= 0).sum())

    def summary(self) -> dict:
        return {"teacher_tokens": len(self.teacher_to_student), "student_tokens": len(self.student.table),
                "mapped_teacher_tokens": self.mapped,
                "mapped_share": self.mapped / max(len(self.teacher_to_student), 1),
                "teacher_fingerprint": self.teacher_fingerprint, "student_fingerprint": self.student_fingerprint}


def student_index(student_tokenizer, speller: Speller) -> dict[bytes, int]:
    """bytes → the student id its tokenizer writes for them (ordinary tokens before byte-fallback ones)."""
    pieces = student_tokenizer.convert_ids_to_tokens(list(range(len(speller.table))))
    order = sorted(range(len(speller.table)),
                   key=lambda i: (bool(pieces[i] and _BYTE_FALLBACK.fullmatch(pieces[i])), i))
    index: dict[bytes, int] = {}
    for i in order:
        if speller.table[i]:
            index.setdefault(speller.table[i], i)
    return index


def spell_greedily(raw: bytes, index: dict[bytes, int], longest: int | None = None) -> list[int] | None:
    """Ids whose bytes (``index``: bytes → id) spell ``raw``, longest match first; None when some byte has no
    token. For bytes that are not whole characters, which a tokenizer given text cannot be asked to cut."""
    longest = longest or max(map(len, index), default=1)
    ids, at = [], 0
    while at < len(raw):
        for width in range(min(longest, len(raw) - at), 0, -1):
            found = index.get(raw[at : at + width])
            if found is not None:
                ids.append(found)
                at += width
                break
        else:
            return None
    return ids


def build_vocab_map(teacher_tokenizer, student_tokenizer) -> VocabMap:
    """The :class:`VocabMap` of the pair; a tokenizer that cannot be read as bytes is refused in one line."""
    teacher = check_spells_bytes(teacher_tokenizer, "teacher tokenizer")
    student = check_spells_bytes(student_tokenizer, "student tokenizer")
    index = student_index(student_tokenizer, student)
    mapping = np.fromiter((index.get(b, -1) if b else -1 for b in teacher.table), dtype=np.int64,
                          count=len(teacher.table))
    for role in _ROLES:
        t, s = getattr(teacher_tokenizer, role, None), getattr(student_tokenizer, role, None)
        if t is not None and s is not None and 0 <= t < len(mapping):
            mapping[t] = s
    return VocabMap(tokenizer_fingerprint(teacher_tokenizer), tokenizer_fingerprint(student_tokenizer), mapping,
                    teacher, student, index)


def map_file_name(teacher_fingerprint: str, student_fingerprint: str) -> str:
    return f"vocab-map-{teacher_fingerprint}-{student_fingerprint}.safetensors"


def save_vocab_map(vocab_map: VocabMap, folder: str | Path) -> Path:
    """Write the map into ``folder`` (atomically) under its two fingerprints; returns the file."""
    from safetensors.numpy import save

    path = Path(folder) / map_file_name(vocab_map.teacher_fingerprint, vocab_map.student_fingerprint)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"version": str(MAP_VERSION), "teacher_fingerprint": vocab_map.teacher_fingerprint,
            "student_fingerprint": vocab_map.student_fingerprint, "summary": json.dumps(vocab_map.summary())}
    write_atomic(path, save({"teacher_to_student": vocab_map.teacher_to_student.astype(np.int32)}, metadata=meta))
    vocab_map.path = path
    return path


def load_or_build(teacher_tokenizer, student_tokenizer, folder: str | Path | None = None) -> VocabMap:
    """The pair's map: read from ``folder`` when a file of both fingerprints is there, else built (and written
    there when ``folder`` is given).

    A stored map whose length or content disagrees with the tokenizers is
    rebuilt and rewritten (it was damaged or edited).
    """
    built = build_vocab_map(teacher_tokenizer, student_tokenizer)
    if folder is None:
        return built
    path = Path(folder) / map_file_name(built.teacher_fingerprint, built.student_fingerprint)
    if path.is_file():
        from safetensors import safe_open

        try:
            with safe_open(str(path), framework="numpy") as handle:
                stored = handle.get_tensor("teacher_to_student").astype(np.int64)
        except Exception:  # safetensors' own error type for a damaged file: rebuilt below
            stored = None
        if stored is not None and np.array_equal(stored, built.teacher_to_student):
            built.path = path
            return built
    save_vocab_map(built, folder)
    return built
