"""The teacher's top-K cache: build it once (``build_cache``), read it for every student (``TopKCache``).

See :mod:`destila.cache.format` for the folder layout and crash-safety rules.
"""

from destila.cache.format import FORMAT_VERSION, Manifest, ShardInfo, read_manifest
from destila.cache.checks.rows import VerifyReport
from destila.cache.checks.shards import CorruptShardError
from destila.cache.checks.verify import verify_cache
from destila.cache.read_specs import InspectSpec, VerifySpec
from destila.cache.reader import TopKCache
from destila.cache.stats import inspect_cache
from destila.cache.spec import BuildSpec
from destila.cache.writer import BuildReport, build_cache

__all__ = [
    "FORMAT_VERSION",
    "BuildReport",
    "BuildSpec",
    "CorruptShardError",
    "InspectSpec",
    "Manifest",
    "ShardInfo",
    "TopKCache",
    "VerifyReport",
    "VerifySpec",
    "build_cache",
    "inspect_cache",
    "read_manifest",
    "verify_cache",
]
