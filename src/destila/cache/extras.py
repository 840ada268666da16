"""What a cache may hold beyond one teacher's top-K: a mixture of teachers, and teacher hidden states.

``destila cache build TEACHER1 TEACHER2 DATA --teacher-weights 0.7,0.3``
stores the top-K (and exact tail mass) of the weighted mixture of the
teachers' full distributions (:mod:`destila.targets.mixture`); every teacher
runs over the same packed sequences and must share the tokenizer.

``--hidden-layers 6,12 --hidden-dim D`` also stores, at every trained
position, the first teacher's outputs of those decoder layers projected to
``D`` dimensions by a fixed, recorded projection (seeded random orthonormal
columns; the identity when ``--hidden-dim`` is not given), in float16, as the
shard tensor ``teacher_hidden [P, n, D]``. ``destila train --hidden_loss``
reads them.

The manifest records both under ``extras`` (a content field: a resume with
other teachers, weights or layers is refused).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from destila.models import (
    config_hash,
    load_causal_lm,
    load_tokenizer,
    output_head,
    tokenizer_fingerprint,
    weight_fingerprint,
)
from destila.targets.mixture import check_shared_tokenizer, normalised_weights
from destila.targets.teachers import PROJECTIONS, HiddenSpec, TeacherSet


@dataclass
class TeacherExtras:
    """Several teachers and stored hidden states; both off by default."""

    mixture_teachers: tuple = field(default=(), metadata={
        "help": "further teachers mixed with TEACHER (from the command line: more TEACHER arguments)"})
    teacher_weights: str | None = field(default=None, metadata={
        "help": "mixture weights, one per teacher, comma-separated, e.g. 0.7,0.3 (normalised to sum 1)"})
    hidden_layers: str | None = field(default=None, metadata={
        "help": "also store the first teacher's outputs of these decoder layers, e.g. 6,12,18,24"})
    hidden_dim: int | None = field(default=None, metadata={
        "help": "stored width D of the hidden states, through a seeded random orthogonal projection "
                "(default: the teacher's width, unprojected)"})
    hidden_projection: str | None = field(default=None, metadata={
        "help": "orthogonal or identity (default: orthogonal with --hidden-dim, identity without)",
        "choices": list(PROJECTIONS)})
    hidden_seed: int = field(default=0, metadata={"help": "seed of the orthogonal projection"})

    def __post_init__(self):
        self.mixture_teachers = tuple(str(t) for t in self.mixture_teachers)
        if self.mixture_teachers and self.teacher_weights is None:
            raise ValueError(f"teacher_weights: {1 + len(self.mixture_teachers)} teachers need one weight each, "
                             "e.g. --teacher-weights 0.7,0.3")
        if self.teacher_weights is not None:
            try:
                weights = [float(w) for w in str(self.teacher_weights).split(",")]
            except ValueError:
                raise ValueError(f"teacher_weights: expected comma-separated numbers such as 0.7,0.3, found "
                                 f"{self.teacher_weights!r}") from None
            normalised_weights(weights, 1 + len(self.mixture_teachers))
        if self.hidden_layers is None and (self.hidden_dim is not None or self.hidden_projection is not None):
            raise ValueError("hidden_dim/hidden_projection: only meaningful with --hidden-layers")
        self.hidden_spec()  # validates the layers, D and projection

    @property
    def weights(self) -> list[float]:
        return [float(w) for w in str(self.teacher_weights).split(",")] if self.teacher_weights else [1.0]

    @property
    def mixture(self) -> bool:
        return bool(self.mixture_teachers)

    @property
    def active(self) -> bool:
        return self.mixture or self.hidden_layers is not None

    def hidden_spec(self) -> HiddenSpec | None:
        if self.hidden_layers is None:
            return None
        return HiddenSpec.parse(self.hidden_layers, self.hidden_dim, self.hidden_projection, self.hidden_seed)

    def record(self, teacher_width: int | None = None, fingerprints: list[dict] | None = None) -> dict | None:
        """The manifest's ``extras``: None when off; the fingerprints and D once the teachers are loaded."""
        if not self.active:
            return None
        hidden = self.hidden_spec()
        record = {
            "mixture": None if not self.mixture else {
                "teachers": list(self.mixture_teachers), "weights": self.weights,
                "fingerprints": fingerprints},
            "hidden": None if hidden is None else (
                hidden.record(teacher_width) if teacher_width else {**hidden.record(1), "dim": hidden.dim}),
        }
        return record


def load_teacher_set(spec, model, tokenizer, device, dtype):
    """The :class:`~destila.targets.teachers.TeacherSet` of ``spec.extras`` with ``model`` first, and the
    manifest's ``extras`` record. Refuses teachers whose tokenizer or vocabulary differs."""
    extras = spec.extras
    models, prints, sizes = [model], [tokenizer_fingerprint(tokenizer)], [output_head(model)[0].shape[0]]
    for name in extras.mixture_teachers:
        prints.append(tokenizer_fingerprint(load_tokenizer(name)))
        check_shared_tokenizer(prints, sizes + [sizes[0]], [str(spec.teacher), *extras.mixture_teachers])
        models.append(load_causal_lm(name, device=device, dtype=dtype))
        sizes.append(output_head(models[-1])[0].shape[0])
        check_shared_tokenizer(prints, sizes, [str(spec.teacher), *extras.mixture_teachers])
    fingerprints = [{"config_hash": config_hash(m), "weight_fingerprint": weight_fingerprint(m)} for m in models[1:]]
    targets = spec.targets
    teachers = TeacherSet(models, extras.weights if extras.mixture else None, targets.top_k, targets.temperature,
                          targets.head_chunk_rows, extras.hidden_spec())
    return teachers, extras.record(model.config.hidden_size, fingerprints if extras.mixture else None)
