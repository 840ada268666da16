"""The raced greedy search against the reference loop: the same layers dropped in the same order, the same
scores, with fewer forwards. Teachers are tiny random models of each family built in code."""

from __future__ import annotations

import pytest
import torch

from destila.student.calibration import from_texts
from destila.student.greedy_search import GreedySearch, counting_forwards, plain_loop_work
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
    """The same layers dropped in the same order, each drop's KL within ``rel`` (both are float32 sums)."""
    assert raced["kept"] == reference["kept"]
    assert [layer for layer, _ in raced["dropped"]] == [layer for layer, _ in reference["dropped"]]
    assert [kl for _, kl in raced["dropped"]] == pytest.approx([kl for _, kl in reference["dropped"]], rel=rel,
                                                                abs=1e-9)
    assert raced["tokens"] == reference["tokens"]


@pytest.mark.parametrize("family", ["llama", "gpt2", pytest.param("qwen2", marks=pytest.mark.slow)])
def test_the_raced_search_drops_what_the_reference_drops_with_fewer_forwards(family, tiny_tokenizer):
    teacher = eight_layer_teacher(family, tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer)
    with counting_forwards(teacher) as reference_counts:
        reference = greedy_cut(teacher, calibration, keep=3, impl="reference")
    assert_same_search(greedy_cut(teacher, calibration, keep=3), reference)  # screened where bfloat16 is native
    raced = GreedySearch(teacher, calibration, screen=False).run(3)
    assert_same_search(raced, reference)
    assert raced["first_round"] is None  # racing measures most layers only far enough to rule them out
    counts = raced["counts"]
    assert counts["head_tokens"] < reference_counts.head_tokens
    assert counts["layer_tokens"] <= reference_counts.layer_tokens
    units = len(list(calibration.batches(GreedySearch.unit_tokens)))
    assert [r["candidates"] for r in raced["rounds"]] == [8, 7, 6, 5, 4]
    assert all(r["exact"] <= r["forwards"] <= r["candidates"] * units for r in raced["rounds"])
    assert counts["forwards_without_racing"] == sum(r["candidates"] * units for r in raced["rounds"])
    # The plain loop's work follows from its loop (docs/student.md states SmolLM2's from it).
    plain = plain_loop_work(8, 3, calibration.input_ids.numel(), from_embeds=family != "gpt2")
    assert (reference_counts.layer_tokens, reference_counts.head_tokens) == (plain["layer_tokens"],
                                                                             plain["head_tokens"])
    if family == "llama":  # every candidate measured exactly on every unit: the reference's arithmetic, our sums
        everything = GreedySearch(teacher, calibration, race=False).run(3)
        assert_same_search(everything, reference)
        assert everything["first_round"] == pytest.approx(reference["first_round"], rel=1e-4, abs=1e-9)


def test_pass_through_layers_cost_exactly_nothing_and_ties_go_to_the_earlier_layer(tiny_tokenizer):
    teacher = eight_layer_teacher("llama", tiny_tokenizer, identity=(2, 3, 5))
    calibration = calibration_of(tiny_tokenizer)
    reference = greedy_cut(teacher, calibration, keep=4, impl="reference")
    raced = greedy_cut(teacher, calibration, keep=4)
    assert_same_search(raced, reference)
    assert raced["dropped"][:3] == [(2, 0.0), (3, 0.0), (5, 0.0)]  # exact zeros, in layer order


def test_racing_rules_out_losers_early_and_changes_nothing(tiny_tokenizer):
    """Layers of very different weight (pass-through layers among working ones): losers stop early."""
    teacher = eight_layer_teacher("llama", tiny_tokenizer, identity=(1, 4))
    calibration = calibration_of(tiny_tokenizer, tokens=1024)
    everything = GreedySearch(teacher, calibration, race=False).run(3)
    raced = GreedySearch(teacher, calibration).run(3)
    assert_same_search(raced, everything, rel=1e-12)  # the same exact KLs, summed in another order
    assert everything["counts"]["exact"] == everything["counts"]["forwards"]
    assert everything["counts"]["forwards"] == everything["counts"]["forwards_without_racing"]
    assert raced["counts"]["forwards"] < everything["counts"]["forwards"]
    assert raced["counts"]["exact"] < raced["counts"]["forwards"]  # ruled out by the bound alone, no head


@pytest.mark.parametrize("family", ["qwen2", "gpt2"])
def test_the_bound_never_exceeds_the_exact_kl(family, tiny_tokenizer):
    """The head-free bound, rounding slack included, stays below the exact KL of every candidate on every unit.
    On the tiny GPT-2 the teacher's likely tokens cover 317 of the 320 tokens: there rounding is all that
    could put the bound above. (How much the bound saves is measured on SmolLM2: docs/student.md.)"""
    teacher = eight_layer_teacher(family, tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer)
    search = GreedySearch(teacher, calibration)
    pairs = []
    with torch.no_grad():
        units = [search._teacher_unit(batch, check=True) for batch in calibration.batches(search.unit_tokens)]
        for position in range(8):
            for unit in units:
                hidden = search._forward(unit, list(range(8)), position)
                pairs.append((search._lower_bound(unit, hidden), search._exact(unit, hidden)))
    assert all(0 <= bound <= exact for bound, exact in pairs)


def test_screening_in_bfloat16_changes_nothing(tiny_tokenizer):
    """A bfloat16 forward only ever lowers a candidate's bound; every KL that decides is a float32 one."""
    teacher = eight_layer_teacher("llama", tiny_tokenizer, identity=(1, 4))
    calibration = calibration_of(tiny_tokenizer)
    plain = GreedySearch(teacher, calibration, screen=False).run(3)
    screened = GreedySearch(teacher, calibration)
    screened.screen = torch.bfloat16  # whatever this CPU multiplies natively: the arithmetic is what is checked
    result = screened.run(3)
    assert result["screen"] == "bfloat16" and plain["screen"] is None
    assert result["closest_bound"] < 1 and plain["closest_bound"] < 1
    assert_same_search(result, plain, rel=1e-12)


def test_a_count_outside_the_teacher_is_refused_before_any_forward(tiny_tokenizer):
    teacher = eight_layer_teacher("llama", tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer, tokens=128)
    with counting_forwards(teacher) as counts, pytest.raises(ValueError, match="between 1 and the teacher's 8"):
        greedy_cut(teacher, calibration, keep=9)
    assert counts.layer_tokens == 0
    with pytest.raises(ValueError, match="impl: expected one of raced, reference, found 'fast'"):
        greedy_cut(teacher, calibration, keep=3, impl="fast")


@pytest.mark.parametrize("family", ["llama", pytest.param("qwen2", marks=pytest.mark.slow)])
def test_two_candidates_at_once_drop_what_one_at_a_time_drops(family, tiny_tokenizer):
    """Two workers measure the two candidates at the front at once, each in its own thread, calling the layers
    directly: the same layers in the same order as the serial race and the reference loop."""
    teacher = eight_layer_teacher(family, tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer)
    reference = greedy_cut(teacher, calibration, keep=3, impl="reference")
    threads = torch.get_num_threads()
    for screen in (False, True):
        serial = GreedySearch(teacher, calibration, screen=screen, workers=1).run(3)
        paired = GreedySearch(teacher, calibration, screen=screen, workers=2).run(3)
        assert (serial["workers"], paired["workers"]) == (1, 2)
        assert_same_search(serial, reference)
        assert_same_search(paired, serial)
        assert paired["counts"]["exact"] <= paired["counts"]["forwards"]
    assert torch.get_num_threads() == threads  # the threads split between the workers are given back
    everything = GreedySearch(teacher, calibration, race=False, workers=2).run(3)
    assert_same_search(everything, reference)
    assert everything["first_round"] == pytest.approx(reference["first_round"], rel=1e-4, abs=1e-9)


def test_calling_the_layers_directly_gives_the_models_own_hidden_states(tiny_tokenizer):
    teacher = eight_layer_teacher("llama", tiny_tokenizer)
    calibration = calibration_of(tiny_tokenizer)
    search = GreedySearch(teacher, calibration)
    with torch.no_grad():
        unit = search._teacher_unit(next(iter(calibration.batches(search.unit_tokens))), check=True)
        assert search.direct
        kept = [0, 2, 3, 5, 7]
        for position in range(len(kept)):
            direct = search._forward(unit, kept, position)
            search.direct = False  # through the model with the other layers taken out (running_layers)
            assert torch.equal(direct, search._forward(unit, kept, position))
            search.direct = True


def test_workers_are_refused_where_the_forwards_change_the_model(tiny_tokenizer):
    teacher = eight_layer_teacher("gpt2", tiny_tokenizer)  # a candidate reruns the whole student through the model
    calibration = calibration_of(tiny_tokenizer, tokens=128)
    with pytest.raises(ValueError, match="one at a time; pass workers=1"):
        GreedySearch(teacher, calibration, workers=2).run(3)
    assert GreedySearch(teacher, calibration).run(6)["workers"] == 1
    with pytest.raises(ValueError, match="workers: expected a positive integer or None, found 0"):
        GreedySearch(teacher, calibration, workers=0)
