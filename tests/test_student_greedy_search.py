"""The raced greedy search against the reference loop: the same layers dropped in the same order, the same
scores, with fewer forwards. Teachers are tiny random models of each family built in code."""

from __future__ import annotations

import pytest

from destila.student.calibration import from_texts
from destila.student.greedy_search import GreedySearch, counting_forwards
from destila.student.importance import greedy_cut
from student_models import make_teacher


def calibration_of(tokenizer, tokens=512, seq_len=64):
    from destila.data import pydoc_texts

    return from_texts(pydoc_texts()[:20], tokenizer, tokens=tokens, seq_len=seq_len)


def eight_layer_teacher(family: str, tokenizer, **kwargs):
    if family == "gpt2":  # its layer 0 reads embeddings plus positions: the path that reruns the whole student
        from conftest import make_tiny_model

        return make_tiny_model("gpt2", len(tokenizer), layers=8)
    return make_teacher(family, len(tokenizer), layers=8, **kwargs)


def assert_same_search(raced: dict, reference: dict, rel: float = 1e-4):
    assert raced["kept"] == reference["kept"]
    assert [layer for layer, _ in raced["dropped"]] == [layer for layer, _ in reference["dropped"]]
    assert [kl for _, kl in raced["dropped"]] == pytest.approx([kl for _, kl in reference["dropped"]], rel=rel,
                                                                abs=1e-9)
    assert raced["first_round"] == pytest.approx(reference["first_round"], rel=rel, abs=1e-9)
    assert raced["tokens"] == reference["tokens"]


@pytest.mark.parametrize("family", ["llama", "qwen2", "gpt2"])
def test_the_raced_search_drops_what_the_reference_drops_with_fewer_forwards(family, tiny_tokenizer):
    teacher = eight_layer_teacher(family, tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer)
    with counting_forwards(teacher) as reference_counts:
        reference = greedy_cut(teacher, calibration, keep=3, impl="reference")
    raced = greedy_cut(teacher, calibration, keep=3)
    assert_same_search(raced, reference)
    counts = raced["counts"]
    assert counts["layer_rows"] < reference_counts.layer_rows and counts["head_rows"] < reference_counts.head_rows
    # Every candidate measured on every unit in the first round, and no round measured more than everything.
    units = len(list(calibration.batches(GreedySearch.unit_tokens)))
    assert raced["rounds"][0]["measured"] == 8 * units
    assert all(r["measured"] <= r["candidates"] * units for r in raced["rounds"])
    assert len(raced["rounds"]) == 5


def test_pass_through_layers_cost_exactly_nothing_and_ties_go_to_the_earlier_layer(tiny_tokenizer):
    teacher = eight_layer_teacher("llama", tiny_tokenizer, identity=(2, 3, 5))
    calibration = calibration_of(tiny_tokenizer)
    reference = greedy_cut(teacher, calibration, keep=4, impl="reference")
    raced = greedy_cut(teacher, calibration, keep=4)
    assert_same_search(raced, reference)
    assert raced["dropped"][:3] == [(2, 0.0), (3, 0.0), (5, 0.0)]  # exact zeros, in layer order
    assert raced["first_round"][2] == raced["first_round"][3] == raced["first_round"][5] == 0.0


def test_racing_measures_less_and_changes_nothing(tiny_tokenizer):
    """Layers of very different weight (three pass-through layers among working ones): losers stop early."""
    teacher = eight_layer_teacher("llama", tiny_tokenizer, identity=(1, 4))
    calibration = calibration_of(tiny_tokenizer, tokens=1024)
    everything = GreedySearch(teacher, calibration, race=False).run(3)
    raced = GreedySearch(teacher, calibration).run(3)
    assert_same_search(raced, everything, rel=1e-12)
    assert everything["counts"]["candidate_units"] == everything["counts"]["candidate_units_without_racing"]
    assert raced["counts"]["candidate_units"] < everything["counts"]["candidate_units"]


def test_a_count_outside_the_teacher_is_refused_before_any_forward(tiny_tokenizer):
    teacher = eight_layer_teacher("llama", tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer, tokens=128)
    with counting_forwards(teacher) as counts, pytest.raises(ValueError, match="between 1 and the teacher's 8"):
        greedy_cut(teacher, calibration, keep=9)
    assert counts.layer_rows == 0
    with pytest.raises(ValueError, match="impl: expected one of raced, reference, found 'fast'"):
        greedy_cut(teacher, calibration, keep=3, impl="fast")
