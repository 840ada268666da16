"""destila: cache a teacher's top-K once, distil students from the cache.

Public names are loaded lazily so that ``destila --help`` does not import torch.
"""

from importlib import import_module

from destila.quiet import quiet_library_noise

__version__ = "0.1.0"

_PUBLIC = {
    "distill_loss": "destila.losses",
    "DistillLoss": "destila.losses",
    "TopKCache": "destila.cache",
    "build_cache": "destila.cache",
}

__all__ = [*_PUBLIC, "__version__"]

quiet_library_noise()  # before any optional engine is imported: its import-time warnings are the noise


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'destila' has no attribute {name!r}")
