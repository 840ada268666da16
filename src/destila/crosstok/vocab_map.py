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

The map is computed from the tokenizers and kept as ``vocab-map-<teacher
fingerprint>-<student fingerprint>.safetensors`` (:func:`load_or_build`), a
small file keyed by both tokenizers' fingerprints (a changed tokenizer
builds a new one), beside its index ``vocab-map-….json``: the map's
identity (a hash of the version and both fingerprints, also in the file's
metadata), and the file's size and SHA-256. As the aligned items' store
(:mod:`~destila.crosstok.staged_store`), it is written staged under a lock
(a killed write leaves a hidden staging folder that the next write removes),
checked when found (a byte changed in place, a file of another map, values
that are not the tokenizers' map: written again, with a warning), and never
written into a folder that belongs to a cache, an export or a model.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from destila.crosstok.staged_store import check_file, check_folder, file_entry, write_staged
from destila.data.spans import Speller, check_spells_bytes
from destila.io import write_atomic
from destila.models import tokenizer_fingerprint

MAP_VERSION = 2  # 2: an index beside the map records its identity, size and SHA-256
log = logging.getLogger("destila.crosstok")
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
    return f"{_store_name(teacher_fingerprint, student_fingerprint)}.safetensors"


def _store_name(teacher_fingerprint: str, student_fingerprint: str) -> str:
    return f"vocab-map-{teacher_fingerprint}-{student_fingerprint}"


def map_key(vocab_map: VocabMap) -> str:
    """The map's identity: 16 hex digits of its version and both tokenizers' fingerprints."""
    parts = [MAP_VERSION, vocab_map.teacher_fingerprint, vocab_map.student_fingerprint]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:16]


def save_vocab_map(vocab_map: VocabMap, folder: str | Path) -> Path:
    """Write the map into ``folder`` under its two fingerprints, with its index (its identity, size and SHA-256),
    staged (:func:`~destila.crosstok.staged_store.write_staged`); returns the file."""
    # safetensors' writer: only when a map is saved
    from safetensors.numpy import save

    folder = Path(folder)
    name = _store_name(vocab_map.teacher_fingerprint, vocab_map.student_fingerprint)
    key = map_key(vocab_map)
    meta = {"version": str(MAP_VERSION), "key": key, "teacher_fingerprint": vocab_map.teacher_fingerprint,
            "student_fingerprint": vocab_map.student_fingerprint, "summary": json.dumps(vocab_map.summary())}

    def write(staging: Path) -> None:
        payload = save({"teacher_to_student": vocab_map.teacher_to_student.astype(np.int32)}, metadata=meta)
        write_atomic(staging / f"{name}.safetensors", payload)
        index = {"version": MAP_VERSION, "key": key, "shards": [file_entry(f"{name}.safetensors", payload)]}
        write_atomic(staging / f"{name}.json", json.dumps(index, indent=1))

    write_staged(folder, name, write, busy=f"vocabulary map: another run is writing it in {folder}")
    vocab_map.path = folder / f"{name}.safetensors"
    return vocab_map.path


def stored_map_fault(vocab_map: VocabMap, folder: str | Path) -> str | None:
    """Why the map stored in ``folder`` is not ``vocab_map`` as it was written (no index, a file of another size
    or SHA-256, another identity, other values), else None."""
    # safetensors: only when a stored map is checked
    from safetensors import safe_open

    name = _store_name(vocab_map.teacher_fingerprint, vocab_map.student_fingerprint)
    index_file = Path(folder) / f"{name}.json"
    if not index_file.is_file():
        return "no index"
    try:
        index = json.loads(index_file.read_text())
        (entry,) = index["shards"]
        if index.get("version") != MAP_VERSION or index.get("key") != map_key(vocab_map):
            return f"its index is of another version or identity ({index.get('key')})"
        if entry["name"] != f"{name}.safetensors":
            return f"its index names another file ({entry['name']!r:.80})"
        check_file(Path(folder) / entry["name"], entry)
        with safe_open(str(Path(folder) / entry["name"]), framework="numpy") as handle:
            if handle.metadata().get("key") != index["key"]:
                return "its file belongs to another map"
            stored = handle.get_tensor("teacher_to_student").astype(np.int64)
    except Exception as err:  # noqa: BLE001 - an edited index or a damaged file (safetensors' own error type too)
        return str(err) or type(err).__name__
    if not np.array_equal(stored, vocab_map.teacher_to_student):
        return "its values are not the tokenizers' map"
    return None


def keep_vocab_map(vocab_map: VocabMap, folder: str | Path) -> Path:
    """The map's file in ``folder``: the one stored there when :func:`stored_map_fault` finds nothing wrong, else
    written again (a damaged one with a warning that names it)."""
    folder = Path(folder)
    check_folder(folder, "vocabulary map")
    fault = stored_map_fault(vocab_map, folder)
    if fault is None:
        vocab_map.path = folder / map_file_name(vocab_map.teacher_fingerprint, vocab_map.student_fingerprint)
        return vocab_map.path
    if fault != "no index":
        log.warning("the vocabulary map in %s cannot be used (%s); writing it again", folder, fault)
    return save_vocab_map(vocab_map, folder)


def load_or_build(teacher_tokenizer, student_tokenizer, folder: str | Path | None = None) -> VocabMap:
    """The pair's map, built from the tokenizers, and kept in ``folder`` when one is given
    (:func:`keep_vocab_map`: the stored file is checked against its index and the tokenizers, and written again
    when damaged, edited or absent)."""
    built = build_vocab_map(teacher_tokenizer, student_tokenizer)
    if folder is not None:
        keep_vocab_map(built, folder)
    return built
