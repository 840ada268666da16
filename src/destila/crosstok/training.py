"""`destila train` with a student whose tokenizer is not the cache's: the items it trains on.

    data = cross_tokenizer_dataset(TopKCache("cache/"), "student/", model, tail="bucket")   # checks only
    # None: the student reads the cache's own tokens (today's path). Else, once the run holds its folder:
    items = training_items(data, "run/alignment", model)   # aligned once, stored; the coverage in one line

A student whose tokenizer fingerprint equals the cache's, or that ships no
tokenizer (a folder of weights only: the vocabulary-size check of the
same-tokenizer path stands), or a run that passes
``--allow-tokenizer-mismatch``, trains as before. Otherwise the cache must
hold byte spans: one built without them is refused with the
``destila cache build ... --spans`` line that rebuilds it.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from destila.cache.reader import TopKCache
from destila.crosstok.coverage import warn_if_low
from destila.crosstok.dataset import CrossTokenizerCache, require_bucket_tail
from destila.crosstok.rebuild import spans_rebuild_command
from destila.crosstok.store import stored_items
from destila.crosstok.vocab_map import keep_vocab_map
from destila.io.progress import progress_bar
from destila.models import load_tokenizer, output_head, tokenizer_fingerprint


def student_tokenizer(student: str):
    """The student folder's tokenizer, or None when it has none that loads."""
    try:
        return load_tokenizer(student)
    except (OSError, ValueError, TypeError):
        return None


def differs(source, tokenizer) -> bool:
    """The cache ``source`` was built with another tokenizer than ``tokenizer`` (None: the student has none)."""
    recorded = getattr(getattr(source, "manifest", None), "tokenizer_fingerprint", "")
    return tokenizer is not None and bool(recorded) and tokenizer_fingerprint(tokenizer) != recorded


def refuse_without_spans(source, path, tokenizer, who: str = "student") -> None:
    """One line for a cache without byte spans: what it lacks, and the command that rebuilds it with them."""
    if source.manifest.spans:
        return
    command = spans_rebuild_command(source.manifest, path)
    how = (f"rebuild it with spans: {command}" if command else
           "rebuild it with the same `destila cache build` command plus --spans into a new folder")
    raise ValueError(f"{who}: its tokenizer (fingerprint {tokenizer_fingerprint(tokenizer)}) differs from the "
                     f"cache's ({source.manifest.tokenizer_fingerprint}), and the cache {path} stores no byte spans "
                     f"(built without --spans), so its tokens cannot be aligned to the teacher's "
                     f"(--allow-tokenizer-mismatch only if the two vocabularies are in fact identical); {how}")


def cross_tokenizer_dataset(source, student: str, model, *, tail: str = "bucket", hidden_loss=None,
                            allow_tokenizer_mismatch: bool = False, path=None):
    """The cache ``source`` read in ``student``'s tokens (a
    :class:`~destila.crosstok.dataset.CrossTokenizerCache`, nothing written yet), or None when the student reads
    the cache's own tokens (see the module docstring). Everything is checked here, before a run claims its folder.

    ``tail`` and ``hidden_loss``: the run's loss options (the unmapped mass needs the rest bucket; teacher hidden
    states sit at teacher positions); ``path``: the cache as the user named it (for messages).
    """
    tokenizer = student_tokenizer(student)
    if allow_tokenizer_mismatch or not differs(source, tokenizer):
        return None
    path = path if path is not None else getattr(source, "path", "the cache")
    if not isinstance(source, TopKCache):
        raise ValueError(f"student: its tokenizer differs from the cache's; a student with another tokenizer "
                         f"trains from a cache folder built with --spans, and {path} is not one (an export or a "
                         "mixture); train from the cache folder itself")
    refuse_without_spans(source, path, tokenizer)
    require_bucket_tail(tail)
    if hidden_loss is not None:
        raise ValueError("hidden_loss: teacher hidden states are stored per teacher token, and a student with "
                         "another tokenizer has other positions; drop --hidden-loss")
    rows = output_head(model)[0].shape[0]
    if rows < len(tokenizer):
        raise ValueError(f"student: its output head has {rows} rows but its tokenizer has {len(tokenizer)} tokens; "
                         "make the student with `destila student init --tokenizer`")
    return CrossTokenizerCache(source, tokenizer)


def training_items(data, folder: str | Path, model=None, *, main_process_first=None, show=print):
    """The items of ``data`` (:func:`cross_tokenizer_dataset`) from their store in ``folder``, written there the
    first time with the vocabulary map; the coverage of every sequence shown in one line (a warning below
    :data:`~destila.crosstok.coverage.LOW_COVERAGE`). ``main_process_first``: a context manager factory under
    which the store is written (the main process writes, the others then read it); ``model``: its context
    must hold the longest sequence in the student's tokens."""
    folder = Path(folder)
    vocab_map = data.vocab_map
    with (main_process_first() if main_process_first is not None else contextlib.nullcontext()):
        keep_vocab_map(vocab_map, folder)  # checked against its index, or written
        items = stored_items(data, folder, progress=_bar(folder))
    items.cache = data.cache  # the teacher's cache behind the items: the model card names it, its teacher and data
    config = getattr(model, "config", None)
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit is not None and items.longest > limit:
        raise ValueError(f"student: its tokens of the cache's sequences reach {items.longest} but its context is "
                         f"{limit} tokens; build the cache with a smaller --seq-len")
    show(items.coverage.line())
    warn_if_low(items.coverage)
    return items


def _bar(folder):
    """A progress callback for the one-time alignment (a tqdm bar, closed at the last sequence)."""
    bar = None

    def progress(done: int, count: int) -> None:
        nonlocal bar
        if bar is None:
            bar = progress_bar(count, desc="aligning the cache to the student's tokenizer (once)", unit="seq")
        bar.update(done - bar.n)
        if done == count:
            bar.close()

    return progress
