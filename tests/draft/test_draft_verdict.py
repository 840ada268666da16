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


def _losing(draft, lookup, cost, proposed, forwards, accepted, draft_tokens=1):
    report = _report(draft, lookup)
    report["settings"] = {"draft_tokens": draft_tokens}
    report["ways"][1].update(forward_cost=cost, proposed=proposed, teacher_forwards=forwards,
                             acceptance=round(accepted / proposed, 4))
    return verdict(report)


def test_a_losing_verdict_says_what_acceptance_the_draft_would_need_at_its_cost():
    # One proposal per forward: speedup = (1 + acceptance × proposals per forward) / cost. The long-run draft on 2
    # Intel Xeon cores (1,424 proposals in 1,448 forwards, 600 kept, cost 1.2666) against prompt lookup's 1.1311×:
    # (1.1311 × 1.2666 − 1) × 1448 / 1424 = 44.0% needed.
    line = _losing(1.1167, 1.1311, 1.2666, 1424, 1448, 600)
    assert "to beat prompt lookup at this forward cost (1.27 plain steps) the draft's proposals would have to be " \
           "kept more than 44% of the time (here 42%)" in line
    line = _losing(0.95, 0.9, 1.3, 100, 100, 20)
    assert "to beat the teacher alone at this forward cost (1.30 plain steps)" in line
    assert "more than 30% of the time (here 20%)" in line
    # Forwards without a proposal count: a reverse-KL draft, sampling, kept 30.2% of 1,711 proposals in 1,741
    # forwards at a cost of 1.2934 and lost to prompt lookup's 1.0059× (1.0023×); taking every forward as proposing
    # would say 30.1% was needed, less than it kept; 30.6% is.
    assert "kept more than 31% of the time (here 30%)" in _losing(1.0023, 1.0059, 1.2934, 1711, 1741, 516)
    # Figures that round to the same whole percent get a decimal: never "29% (here 29%)".
    assert "kept more than 29.3% of the time (here 29.1%)" in _losing(1.0, 1.01, 1.28, 1000, 1000, 291)
    # Several proposals per forward: tokens per forward is not one acceptance, so no figure is given.
    assert "would have to be kept" not in _losing(1.0, 1.13, 1.4, 2000, 1000, 600, draft_tokens=2)
    report = _report(1.12, 1.13)  # a report from before forwards were timed
    report["ways"][1].update(proposed=1000, teacher_forwards=1000, acceptance=0.42)
    assert "would have to be kept" not in verdict(report)


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
