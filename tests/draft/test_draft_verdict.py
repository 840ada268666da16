"""The lines under a draft measurement: what to use (the draft, prompt lookup, or neither), and when the baseline
was not fair."""

import pytest

from destila.draft.table import baseline_note, verdict


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


def _settings(per_token=40.0, one=36.0, two=35.0):
    return {"teacher_alone_ms_per_token": per_token, "teacher_forward_ms": one, "teacher_forward_2_ms": two,
            "baseline_fair": per_token <= 1.5 * one, "one_token_forward_fair": one <= 1.1 * two}


def test_a_fair_baseline_gets_no_note_and_an_unfair_one_says_why():
    assert baseline_note(_settings()) is None
    assert "another load on this machine slows the baseline" in baseline_note(_settings(per_token=60.0))
    # A one-token forward dearer than a two-token one: plain decoding is not at its fastest (a mistimed product).
    note = baseline_note(_settings(one=43.0, two=38.0))
    assert "1 new token took 43.0 ms, one of 2 38.0 ms" in note and "not at its fastest" in note
    older = _settings()
    del older["one_token_forward_fair"], older["teacher_forward_2_ms"]  # a report from before the check
    assert baseline_note(older) is None
