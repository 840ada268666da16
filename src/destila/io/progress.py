"""Progress bars: every bar destila draws is made here, on stderr, by tqdm.

One place decides the library (``tqdm.auto``: a notebook widget in Jupyter,
text elsewhere) and how ``show=False`` hides a bar, so that a command's
``--no-progress`` and a Python caller's ``progress=False`` mean the same.

Naive equivalent: ``from tqdm.auto import tqdm; tqdm(total=n, desc=..., unit=..., disable=not show)``.
"""

from __future__ import annotations


def progress_bar(total: float | None = None, *, desc: str | None = None, unit: str = "it", show: bool = True,
                 **options):
    """A tqdm bar of ``total`` ``unit`` (None: unknown), labelled ``desc``; hidden (every call a no-op) unless
    ``show``. ``options`` go to tqdm as they are (``initial``, ``unit_scale``, ``dynamic_ncols``, ``mininterval``)."""
    from tqdm.auto import tqdm  # here, not at the top: ``destila --help`` never draws a bar

    return tqdm(total=total, desc=desc, unit=unit, disable=not show, **options)
