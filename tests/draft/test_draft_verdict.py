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


def test_a_losing_verdict_says_what_acceptance_the_draft_would_need_at_its_cost():
    # One proposal per forward: speedup = (1 + acceptance) / cost, so beating prompt lookup's 1.13× at a cost of
    # 1.27 plain steps takes 1.13 × 1.27 − 1 = 43.5% (the long-run draft on 2 Intel Xeon cores kept 42%).
    report = _report(1.12, 1.13)
    report["settings"] = {"draft_tokens": 1}
    report["ways"][1].update(forward_cost=1.27, acceptance=0.421)
    line = verdict(report)
    assert "to beat prompt lookup at this forward cost (1.27 plain steps) the draft's proposals would have to be " \
           "kept more than 44% of the time (here 42%)" in line
    report["ways"][2]["speedup"] = 0.9
    report["ways"][1].update(speedup=0.95, forward_cost=1.3, acceptance=0.2)
    assert "to beat the teacher alone at this forward cost (1.30 plain steps)" in verdict(report)
    assert "more than 30% of the time (here 20%)" in verdict(report)
    # Figures that round to the same whole percent get a decimal, so the line never reads "30% (here 30%)" (TVD's
    # sampled draft: 1.0062 × 1.2834 − 1 = 29.1% needed, 28.5% kept).
    report["ways"][2]["speedup"] = 1.0062
    report["ways"][1].update(speedup=0.9967, forward_cost=1.2834, acceptance=0.2851)
    assert "kept more than 29.1% of the time (here 28.5%)" in verdict(report)
    # Several proposals per forward: tokens per forward is not one acceptance, so no figure is given.
    report["settings"]["draft_tokens"] = 2
    assert "would have to be kept" not in verdict(report)
    del report["settings"]  # a report from before forwards were timed
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
