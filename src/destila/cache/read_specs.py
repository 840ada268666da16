"""`InspectSpec` and `VerifySpec`: what `inspect_cache` and `verify_cache` are asked, declared once.

The ``destila cache inspect|verify`` flags are generated from these fields;
Python users pass the same objects (or only the cache folder)::

    inspect_cache(InspectSpec("cache/", max_sequences=100, coverage=0.9))
    verify_cache(VerifySpec("cache/"))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from destila.cache.k_prime import DEFAULT_COVERAGE
from destila.ranges import check_optional_int_at_least


def _check_folder(cache) -> None:
    if not isinstance(cache, (str, Path)):
        raise ValueError(f"cache: expected the cache folder (a path), found {cache!r}")


@dataclass
class InspectSpec:
    """The cache folder, how many sequences the statistics read, and the mass K′ must cover."""

    cache: str | Path = field(metadata={"help": "the cache folder, or its export (`destila cache export`)",
                                        "metavar": "CACHE"})
    max_sequences: int | None = field(default=None, metadata={
        "help": "compute the statistics on the first N sequences only"})
    coverage: float = field(default=DEFAULT_COVERAGE, metadata={
        "help": "suggest the smallest K′ whose mean covered teacher mass reaches this"})

    def __post_init__(self):
        _check_folder(self.cache)
        check_optional_int_at_least("max_sequences", self.max_sequences, 1, "leave it out to read every sequence")
        coverage = self.coverage
        if isinstance(coverage, bool) or not isinstance(coverage, (int, float)) or not 0 < coverage <= 1:
            raise ValueError(f"coverage: expected a fraction of the teacher's mass in (0, 1], found {coverage!r}")

    @classmethod
    def of(cls, spec: InspectSpec | str | Path, **options) -> InspectSpec:
        """``spec`` itself, or the spec of a cache folder and keyword ``options`` (None: the default)."""
        given = {name: value for name, value in options.items() if value is not None}
        if isinstance(spec, cls):
            if given:
                raise ValueError("inspect_cache: pass either an InspectSpec or (path, **options), not both")
            return spec
        return cls(spec, **given)


@dataclass
class VerifySpec:
    """The cache folder (or export) whose every shard is checked."""

    cache: str | Path = field(metadata={"help": "the cache folder, or its export (`destila cache export`)",
                                        "metavar": "CACHE"})

    def __post_init__(self):
        _check_folder(self.cache)

    @classmethod
    def of(cls, spec: VerifySpec | str | Path) -> VerifySpec:
        return spec if isinstance(spec, cls) else cls(spec)
