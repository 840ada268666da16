"""The line under a draft measurement that says what to use: the draft, prompt lookup, or neither."""

import pytest

from destila.draft.table import verdict


def _report(draft, lookup=None):
    ways = [{"way": "teacher", "speedup": 1.0}, {"way": "draft", "speedup": draft}]
    if lookup is not None:
        ways.append({"way": "prompt_lookup", "speedup": lookup})
    return {"ways": ways}


@pytest.mark.parametrize("draft, lookup, expected", [
    (1.08, 1.22, "prompt lookup, which needs no draft, made the teacher 1.22× faster here, the draft 1.08×: use "
                 "prompt lookup"),
    (0.95, 1.24, "prompt lookup, which needs no draft, made the teacher 1.24× faster here, the draft 0.95×"),
    (0.95, 0.90, "the draft made the teacher no faster here (0.95×): train it longer"),
    (0.95, None, "the draft made the teacher no faster here (0.95×)"),
    (1.08, 1.05, "the draft made the teacher 1.08× faster here, ahead of prompt lookup (1.05×)"),
    (1.08, None, "the draft made the teacher 1.08× faster here"),
])
def test_the_verdict_names_the_fastest_way(draft, lookup, expected):
    line = verdict(_report(draft, lookup))
    assert line.startswith("verdict: ") and expected in line


def test_no_verdict_without_a_draft():
    assert verdict({"ways": [{"way": "teacher", "speedup": 1.0}, {"way": "prompt_lookup", "speedup": 1.2}]}) is None
