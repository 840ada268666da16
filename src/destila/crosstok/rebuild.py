"""The ``destila cache build`` line that rebuilds a cache with byte spans, from what its manifest records.

    spans_rebuild_command(TopKCache("cache/").manifest, "cache/")
    # 'destila cache build smollm2 pydoc -o cache-spans --spans --max-tokens 32768 --encoding compact'

Only the options whose value differs from the command's default are written,
so the line is the one a user would type. A cache whose data were given from
Python (a list of documents) or that mixes teachers has no such line: ``None``.
"""

from __future__ import annotations

import shlex
from dataclasses import fields
from pathlib import Path


def _defaults(cls) -> dict:
    return {f.name: f.default for f in fields(cls)}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def spans_rebuild_command(manifest, path: str | Path) -> str | None:
    """The command that builds the cache at ``path`` again, with ``--spans``, into ``<path>-spans``."""
    # the cache and data packages import torch and pyarrow: only when the command is written
    from destila.cache.encodings import encoding_of
    from destila.cache.kinds import kind_of
    from destila.cache.spec import BuildSpec
    from destila.data.spec import DataSpec
    from destila.targets.spec import TargetSpec

    data = dict(manifest.data or {})
    source = data.get("source", manifest.data_source)
    if not isinstance(source, str) or not source or source.startswith("<") or manifest.extras:
        return None
    # The row length and budget are the data's fields (DataSpec), the encoding the build's (BuildSpec).
    build = {**_defaults(DataSpec), **_defaults(BuildSpec)}
    targets = manifest.targets if isinstance(manifest.targets, dict) else {}
    words = ["destila", "cache", "build", manifest.teacher, source, "-o", f"{str(path).rstrip('/')}-spans", "--spans"]
    if manifest.teacher_gguf_file:
        words += ["--gguf-file", manifest.teacher_gguf_file]
    options = {"seq_len": manifest.seq_len, "max_tokens": manifest.max_tokens, "encoding": manifest.encoding}
    if encoding_of(manifest.encoding).keeps_logprob_dtype:
        options["logprob_dtype"] = manifest.logprob_dtype
    for name, value in options.items():
        if value != build[name]:
            words += [_flag(name), str(value)]
    # The data options: a conversation's or a pair's fields, and the packing and loss mask where they differ from
    # what those fields give by default.
    given = {name: data[name] for name in ("text_field", "messages_field", "prompt_field", "completion_field",
                                            "split", "subset") if data.get(name) is not None}
    plain = DataSpec(source, **{k: v for k, v in given.items() if k.endswith("_field")})
    defaults = {**_defaults(DataSpec), "loss_on": plain.loss_on, "packing": plain.packing}
    for name in ("text_field", "messages_field", "prompt_field", "completion_field", "split", "subset", "loss_on",
                 "packing"):
        if data.get(name) is not None and data[name] != defaults[name]:
            words += [_flag(name), str(data[name])]
    if data.get("streaming"):
        words.append("--streaming")
    target_defaults = _defaults(TargetSpec)
    kind = targets.get("kind", target_defaults["kind"])
    names = ("kind", "temperature") + tuple(kind_of(kind).fields)  # the kind's own fields (top_k; samples, seed)
    for name in names:
        if name in targets and targets[name] != target_defaults[name]:
            words += [_flag(name), str(targets[name])]
    return shlex.join(words)
