"""TRL's ``datasets:`` mixture (``DatasetMixtureConfig``) as the online data of `destila train`.

A TRL config names its data as a mixture::

    datasets:
      - path: json
        data_files: a.jsonl
      - path: owner/name
        name: subset
        split: train
        columns: [text]
        fraction: 0.3
    test_split_size: 0.1

The section is read with TRL's own ``DatasetMixtureConfig`` (each entry a
``DatasetConfig``: ``path``, ``name``, ``data_dir``, ``data_files``,
``split``, ``columns``, ``fraction``) and loaded with TRL's ``get_dataset``,
so every key keeps TRL's meaning. The mixture is saved once as a
``datasets`` folder under the data store (:func:`DatasetMixture.folder`,
named by the mixture's content fingerprint), which becomes ``--data``: the
data options (``--seq-len``, ``--packing``, the fields, ...) read it as they
read any folder, and a resumed run finds the same folder.

``test_split_size`` (a fraction) holds that fraction out for evaluation, as
``eval_fraction`` does: of the packed sequences, not of the documents.
``streaming: true`` beside a mixture is refused (the mixture is saved whole;
stream one source with ``--data ... --streaming``).

Naive equivalent::

    trl.get_dataset(DatasetMixtureConfig(datasets=entries))["train"].save_to_disk(folder); data = folder
"""

from __future__ import annotations

import dataclasses
import shutil

from destila.io import publish_folder
from destila.io.temporaries import create_staging_dir


class DatasetMixture:
    """TRL's ``datasets:`` section, checked as TRL's ``DatasetMixtureConfig`` builds it; ``str()`` names its
    sources (``a.jsonl + owner/name``)."""

    def __init__(self, entries):
        try:
            from trl.scripts.utils import DatasetConfig, DatasetMixtureConfig  # heavy: trl (optional)
        except ImportError as err:
            raise ValueError(f"reading TRL's mixture needs trl ({err}); pip install trl, or give one source as "
                             "--data") from err

        if not isinstance(entries, (list, tuple)) or not entries:
            raise ValueError(f"expected a list of datasets (each with a path), found {entries!r}")
        names = {f.name for f in dataclasses.fields(DatasetConfig)}
        for entry in entries:
            unknown = sorted(set(entry) - names) if isinstance(entry, dict) else None
            if not isinstance(entry, dict) or "path" not in entry or unknown:
                what = f"unknown keys {', '.join(unknown)}" if unknown else "no path"
                raise ValueError(f"{entry!r} has {what}; TRL's DatasetConfig takes {', '.join(sorted(names))}")
        self.config = DatasetMixtureConfig(datasets=[dict(entry) for entry in entries])

    def __str__(self) -> str:
        return " + ".join(_described(entry) for entry in self.config.datasets)

    __repr__ = __str__

    def folder(self) -> str:
        """The mixture loaded by TRL's ``get_dataset`` and saved as a ``datasets`` folder under the data store,
        named by its content fingerprint: saved once, found again by every run of the same mixture."""
        from trl import get_dataset  # heavy: trl (optional)

        # destila.data imports torch; this module serves `destila train`'s light parser
        from destila.data.sources import quiet_datasets
        from destila.data.store import store_root

        try:
            with quiet_datasets():
                mixed = get_dataset(self.config)["train"]
        except Exception as err:  # datasets raises a zoo of types; name the mixture and the cause in one line
            cause = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise ValueError(f"datasets: TRL's get_dataset could not build the mixture {self}: {cause}") from err
        target = store_root() / f"mixture-{mixed._fingerprint}"
        if not target.is_dir():
            target.parent.mkdir(parents=True, exist_ok=True)
            staging = create_staging_dir(target)
            mixed.save_to_disk(str(staging))
            try:
                publish_folder(staging, target)
            except OSError:  # another process (a torchrun rank) published the same mixture first
                shutil.rmtree(staging, ignore_errors=True)
                if not target.is_dir():
                    raise
        return str(target)


def _described(entry) -> str:
    files = entry.data_files
    files = ",".join(files) if isinstance(files, (list, tuple)) else files
    parts = [entry.path] + [f"{key} {value}" for key, value in (("name", entry.name), ("data_files", files),
                                                                 ("split", entry.split if entry.split != "train"
                                                                  else None), ("fraction", entry.fraction))
                            if value is not None]
    return " ".join(str(p) for p in parts)


def held_out_fraction(value) -> float:
    """TRL's ``test_split_size`` as ``eval_fraction``: a fraction in (0, 1); a count of rows is refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"expected a fraction between 0 and 1 (held out as eval_fraction), found {value!r}")
    return float(value)


def materialised(data):
    """``data`` as ``--data`` reads it: a :class:`DatasetMixture` becomes its folder; anything else is itself."""
    return data.folder() if isinstance(data, DatasetMixture) else data
