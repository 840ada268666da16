"""``init_student``: design a student from a teacher and write it as an ordinary HF folder.

The design is a layer cut (a count spread evenly, an explicit list, or layers
chosen by measured importance), optionally followed by width pruning, or a
fresh model from config changes. The folder holds the weights, the config,
the teacher's tokenizer and ``destila_student.json``: how the student was
made, and every score it was chosen by.

A :class:`~destila.student.spec.StudentInitSpec` asks for ``layers`` (a
count, spread per ``select``: ``"even"``, ``"importance"`` or
``"contiguous"``; or a list of teacher layer indices) and/or width targets
(``hidden_size``, ``intermediate_size``, ``num_attention_heads``,
``num_key_value_heads``: Minitron-style pruning of the cut, see
:mod:`destila.student.width`), or ``config`` (a fresh model). ``criterion``
(``"greedy_kl"``, the default, ``"skip_kl"`` or ``"block_influence"``) ranks
the layers for ``select="importance"``. Calibration text (``calibration``
token ids ``[S, L]``, a ``cache`` folder, or a ``data`` source; about
``calibration_tokens`` tokens) is needed by the measured selections and width
pruning; when given, the summary holds the starting perplexity of student and
teacher on its held-out rows. ``tokenizer``: a tokenizer folder with another
vocabulary than the teacher's; the student gets it, a cut keeps the teacher's
embedding rows of the tokens both have and builds the others from their
pieces (:func:`destila.crosstok.transplant_vocabulary`; the summary's
``vocabulary`` holds the counts), a fresh model is sized to it. No starting
perplexity is measured then (the calibration text is in the teacher's tokens).
"""

from __future__ import annotations

import contextlib
import json
import shutil
from pathlib import Path

import torch

from destila.crosstok.student_tokenizer import load_student_tokenizer
from destila.io import exclusive_lock, names_user_path, write_atomic
from destila.models import INIT_INCOMPLETE, load_causal_lm, load_tokenizer
from destila.io.permissions import readable_by_all
from destila.student import calibration as calib
from destila.student.cut import _supported_prefix, cut_student
from destila.student.fresh import fresh_student
from destila.student.importance import contiguous_cut, greedy_cut, layer_scores, most_important
from destila.student.layers import check_layer_indices, evenly_spaced_layers
from destila.student.spec import DEFAULT_CALIBRATION_TOKENS, WIDTH_FIELDS, StudentInitSpec, check_selection
from destila.student.width import prune_width, resolve_targets

RECORD = "destila_student.json"
_LOCK = ".lock"  # the name cache build and train use too: one writer per folder, whichever command
"""The record of how a student folder was made (criterion, scores, kept layers and channels)."""


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def resolve_calibration(tokenizer, spec: StudentInitSpec):
    """The spec's :class:`~destila.student.calibration.Calibration` (from ``calibration``, ``cache`` or
    ``data``; the spec allows one), or None.

    ``spec.calibration`` may be a ``Calibration``, or token ids ``[S, L]`` / ``[N]`` (one row).
    """
    cache, data, calibration = spec.cache, spec.data, spec.calibration
    tokens = spec.calibration_tokens or DEFAULT_CALIBRATION_TOKENS
    if cache is not None:
        return calib.from_cache(cache, tokens, tokenizer)
    if data is not None:
        return calib.from_data(data, tokenizer, tokens)
    if calibration is None or isinstance(calibration, calib.Calibration):
        return calibration
    ids = torch.as_tensor(calibration, dtype=torch.long)
    ids = ids.view(1, -1) if ids.dim() == 1 else ids
    if ids.dim() != 2 or ids.shape[1] < 2:
        raise ValueError(f"calibration: expected token ids [rows, length >= 2], found shape {list(ids.shape)}")
    scored = torch.ones_like(ids, dtype=torch.bool)
    scored[:, -1] = False
    return calib.Calibration(ids, scored, None, source="token ids")


def choose_layers(teacher, layers, select: str | None, selection, criterion: str | None = None,
                  progress: bool = False) -> tuple[list[int], dict]:
    """``(kept teacher layers, record)`` for ``--layers`` (a count or a list) and ``--select``."""
    total = teacher.config.num_hidden_layers
    check_selection(layers, select, criterion)
    criterion = criterion or "greedy_kl"
    if isinstance(layers, (list, tuple)):
        return check_layer_indices(list(layers), total), {"select": "list"}
    select = select or "even"
    kept = evenly_spaced_layers(total, layers)  # also checks the count
    if select == "even":
        return kept, {"select": "even"}
    if selection is None:
        raise ValueError(f"--select {select}: measuring the layers needs calibration text; "
                         "add --cache CACHE or --data DATA (e.g. --data pydoc)")
    _supported_prefix(teacher.config)
    if select == "contiguous":
        scores = layer_scores(teacher, selection, skip_kl=False, drop_block=total - layers, progress=progress)
        kept = contiguous_cut(scores["block_distance"], total, layers)
        return kept, {"select": "contiguous", "criterion": "block_distance",
                      "block_distance": {str(k): v for k, v in scores["block_distance"].items()},
                      "calibration_tokens": scores["tokens"]}
    if criterion == "greedy_kl":
        path = greedy_cut(teacher, selection, layers, progress=progress)
        return path["kept"], {"select": "importance", "criterion": criterion,
                              "dropped": [{"layer": layer, "kl": kl} for layer, kl in path["dropped"]],
                              "skip_kl": path["first_round"], "calibration_tokens": path["tokens"]}
    # Block influence alone costs one pass; skip-KL about half a pass per layer.
    scores = layer_scores(teacher, selection, skip_kl=criterion == "skip_kl", progress=progress)
    kept = most_important(scores[criterion], layers)
    return kept, {"select": "importance", "criterion": criterion, "block_influence": scores["block_influence"],
                  "skip_kl": scores["skip_kl"], "calibration_tokens": scores["tokens"]}


def init_student(spec: StudentInitSpec | str, out: str | Path | None = None, *, progress: bool = False,
                 **options) -> dict:
    """Write the student folder ``spec`` describes (weights, config, tokenizer, ``destila_student.json``);
    return a summary dict.

    ``init_student(StudentInitSpec(teacher, out, layers=..., ...))``; the flat form
    ``init_student(teacher, out, layers=..., ...)`` builds the same spec from its keywords (the designs
    and their options: the module docstring). Summary keys: ``method``, ``kept_layers``,
    ``student_parameters``, ``teacher_parameters``, ``teacher_layers``, ``student_layers``,
    ``start_perplexity``, ``teacher_perplexity``, ``out``. Refuses to overwrite a non-empty folder.
    ``progress`` shows the measurements' progress on stderr.
    """
    spec = _spec_of(spec, out, options)
    with _claim(spec.out):  # one writer: a second init into the same folder is refused at once
        teacher = load_causal_lm(spec.teacher, gguf_file=spec.gguf_file)
        if spec.width:  # impossible sizes are refused before any measurement
            resolve_targets(teacher.config, **spec.width)
        teacher_tokenizer = load_tokenizer(spec.teacher, gguf_file=spec.gguf_file)
        student_tokenizer = load_student_tokenizer(spec.tokenizer) if spec.tokenizer is not None else None
        calibration = resolve_calibration(teacher_tokenizer, spec)
        selection, held_out = calibration.split() if calibration is not None else (None, None)
        student, summary, record = _design(teacher, spec, selection, student_tokenizer, progress)
        if student_tokenizer is not None:
            summary["vocabulary"] = (vocabulary_of(student, teacher_tokenizer, student_tokenizer, not spec.fresh)
                                     | {"tokenizer": str(spec.tokenizer)})
            held_out = None  # the calibration rows are teacher tokens: no student perplexity on them
        summary.update(_sizes(teacher, student, spec.out))
        if held_out is not None:
            summary.update(_start_perplexity(teacher, student, calibration, selection, held_out))
        # The record keeps the full width entry.
        record.update({k: v for k, v in summary.items() if k not in ("out", "width")})
        _write_student(student, student_tokenizer or teacher_tokenizer, spec.out, record)
        return summary


def _spec_of(spec, out, options: dict) -> StudentInitSpec:
    """``spec`` itself, or the :class:`StudentInitSpec` of the flat form."""
    if not isinstance(spec, StudentInitSpec):
        return StudentInitSpec(spec, out, **options)
    if out is not None or options:
        raise ValueError("init_student: pass either a StudentInitSpec or (teacher, out, **options), not both")
    return spec


def _design(teacher, spec: StudentInitSpec, selection, student_tokenizer, progress: bool) -> tuple:
    """``(student, summary, record)``: the teacher cut (and narrowed), or a fresh model."""
    record: dict = {"teacher": str(spec.teacher)}
    if spec.fresh:
        student = fresh_student(teacher, spec.config, seed=spec.seed or 0, tokenizer=student_tokenizer)
        return student, {"method": "fresh", "overrides": spec.config}, record
    total = teacher.config.num_hidden_layers
    layers = list(range(total)) if spec.layers is None else spec.layers
    kept, record["layers"] = choose_layers(teacher, layers, spec.select, selection, spec.criterion, progress)
    student, kept = cut_student(teacher, indices=kept)
    summary = {"method": "cut", "kept_layers": kept, "select": record["layers"]["select"]}
    if spec.width:
        student, record["width"] = prune_width(student, selection, **spec.width)
        summary["method"] = "cut+width" if len(kept) < total else "width"
        summary["width"] = {k: record["width"][k] for k in (*WIDTH_FIELDS, "head_dim")}
    return student, summary, record


def _sizes(teacher, student, out: Path) -> dict:
    """The summary's sizes (the perplexities None until measured)."""
    return dict(out=str(out), teacher_parameters=_count(teacher), student_parameters=_count(student),
                teacher_layers=teacher.config.num_hidden_layers, student_layers=student.config.num_hidden_layers,
                start_perplexity=None, teacher_perplexity=None)


def _start_perplexity(teacher, student, calibration, selection, held_out) -> dict:
    """Student and teacher perplexity on the calibration's held-out rows (all of them when none are held out)."""
    return dict(start_perplexity=calib.perplexity(student, held_out),
                teacher_perplexity=calib.perplexity(teacher, held_out),
                perplexity_tokens=int(held_out.scored[:, :-1].sum()),
                perplexity_held_out=held_out is not selection,
                calibration=calibration.source, calibration_tokens=calibration.tokens)


def vocabulary_of(student, teacher_tokenizer, student_tokenizer, cut: bool) -> dict:
    """A cut student's vocabulary transplanted to ``student_tokenizer``'s (counts of copied, composed and mean
    rows); a fresh one's is already the tokenizer's size."""
    from destila.crosstok.transplant import set_special_ids, transplant_vocabulary  # transformers, only here

    if cut:
        return transplant_vocabulary(student, teacher_tokenizer, student_tokenizer)
    set_special_ids(student, student_tokenizer)
    return {"vocab_size": len(student_tokenizer)}


# A full disk or a read-only folder while the student is written, safetensors' Rust errors included.
_CANNOT_WRITE = "student init: cannot write the student folder {root}: {reason}; choose a folder you can write to"


@contextlib.contextmanager
def _claim(out: Path):
    """Hold ``out``'s lock (a second init into it fails at once); a folder this call created and left empty goes."""
    if out.exists() and not out.is_dir():
        raise FileExistsError(f"student init: {out} is a file; choose a new folder for the student")
    created = not out.exists()
    with names_user_path(out, _CANNOT_WRITE):
        out.mkdir(parents=True, exist_ok=True)
        lock = exclusive_lock(out / _LOCK, f"student init: another destila command is writing to {out}; wait for "
                              "it to finish, stop it, or choose another -o", remove_on_release=True)
    try:
        # Checked under the lock: another init may have filled the folder since. A lock file left by a
        # refused cache build is no content.
        if any(p.name != _LOCK for p in out.iterdir()) and not (out / INIT_INCOMPLETE).is_file():
            raise FileExistsError(f"student init: {out} exists and is not empty; choose a new folder")
        yield
    finally:
        lock.close()
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def _write_student(student, tokenizer, out: Path, record: dict) -> None:
    """Save into ``out`` itself, flagged incomplete until the last byte is written.

    Staging inside the output folder keeps every temporary in a folder this
    command owns (a sibling temporary in the parent would land in a folder
    that may not be the user's, and errors would name it instead of ``out``).
    A rerun after a crash finds the flag, clears the folder and starts over.
    """
    with names_user_path(out, _CANNOT_WRITE + " (a rerun clears what was written)"):
        out.mkdir(parents=True, exist_ok=True)
        if (out / INIT_INCOMPLETE).is_file():
            for leftover in (p for p in out.iterdir() if p.name != _LOCK):  # ours, held
                shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
        (out / INIT_INCOMPLETE).write_text("written by `destila student init`; removed when the folder is complete\n")
        student.save_pretrained(out)
        tokenizer.save_pretrained(out)
        write_atomic(out / RECORD, json.dumps(record, indent=1) + "\n")
        readable_by_all(out)
        (out / INIT_INCOMPLETE).unlink()
