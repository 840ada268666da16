"""A spans cache read in a student's tokens: identical tokenizers give the cache's own items and loss; another
tokenizer gives its tokens of the same text, labels on the same turns, normalised targets; bad input in one line."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
from conftest import make_tiny_model

from destila import distill_loss
from destila.cache.reader import TopKCache
from destila.crosstok.coverage import coverage_report
from destila.crosstok.dataset import ALIGNMENTS, CrossTokenizerCache
from destila.data import collate
from destila.data.spans import Speller


def _loss(model, batch, labels=None, **options):
    """The loss of a collated batch; ``labels`` position-aligned (default: the batch's)."""
    hidden = model.model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).last_hidden_state
    labels = batch["labels"] if labels is None else labels
    return distill_loss(hidden, model.lm_head.weight, batch["topk_ids"], batch["topk_logprobs"],
                        batch["tail_logmass"], labels, **options)


@pytest.mark.parametrize("cache_name", ["bfd_spans_cache", "chat_spans_cache"])
def test_identical_tokenizers_give_the_same_items_and_loss(cache_name, request, tiny_chat_tokenizer, tmp_path):
    """Whole documents per row: the student's tokenization of each is the teacher's, token for token. (With
    ``packing=documents`` a row cut inside a document is tokenized as the fragment it holds, so the tokens next
    to the cut may differ: docs/cross_tokenizer.md.)"""
    cache = TopKCache(request.getfixturevalue(cache_name))
    data = CrossTokenizerCache(cache, tiny_chat_tokenizer, map_folder=tmp_path)
    model = make_tiny_model("llama", len(tiny_chat_tokenizer), seed=3).double()
    keys = ("input_ids", "position_ids", "labels", "topk_ids", "topk_logprobs", "tail_logmass")
    for start in range(0, len(cache), 4):
        indices = range(start, min(start + 4, len(cache)))
        same = [{k: cache[i][k] for k in keys} for i in indices]
        cross = [{k: data[i][k] for k in keys} for i in indices]
        for a, b in zip(same, cross):
            length = len(b["input_ids"])  # the cross item leaves the row's padding to the collate
            assert (a["labels"][length:] == -100).all()
            for key in keys:
                assert torch.equal(a[key][:length].to(b[key].dtype), b[key]), key
        for impl in ("fused", "dense"):
            options = dict(impl=impl, hard_weight=0.5, divergence="forward_kl")
            want = _loss(model, collate([{**x, "topk_logprobs": x["topk_logprobs"].double()} for x in same]), **options)
            got = _loss(model, collate([{**x, "topk_logprobs": x["topk_logprobs"].double()} for x in cross]), **options)
            assert abs(float(got.detach()) - float(want.detach())) <= 1e-6 * max(1.0, abs(float(want.detach())))
    report = coverage_report(data)
    assert (report.mapped_mass, report.one_to_one, report.distilled_rows) == (1.0, 1.0, 1.0)


def _blocks(item):
    positions = item["position_ids"].numpy()
    cuts = sorted(set([0, len(positions)] + np.flatnonzero(positions == 0).tolist()))
    return list(zip(cuts[:-1], cuts[1:]))


def test_a_space_mark_student_on_conversations(chat_spans_cache, space_mark_tokenizer, tiny_chat_tokenizer, tmp_path):
    cache = TopKCache(chat_spans_cache)
    data = CrossTokenizerCache(cache, space_mark_tokenizer, map_folder=tmp_path)
    table = Speller(space_mark_tokenizer).table
    teacher_table = Speller(tiny_chat_tokenizer).table
    totals = np.zeros(len(ALIGNMENTS), np.int64)
    for index in range(len(data)):
        item, teacher = data[index], cache[index]
        for (a, b), (ta, tb) in zip(_blocks(item), _blocks(teacher)):
            # the student's tokens spell the block's text (the ▁ it writes before the first word aside)
            text = b"".join(teacher_table[int(t)] for t in teacher["input_ids"][ta:tb])
            pieces = [table[int(s)] for s in item["input_ids"][a:b]]
            spelt, at, starts = b"", 0, []
            for piece in pieces:
                if not text.startswith(piece, at):
                    piece = piece[1:]
                starts.append(at)
                spelt += piece
                at += len(piece)
            assert spelt == text
            # labels only inside assistant turns, on the next student token
            labels = item["labels"][a:b].numpy()
            for row in np.flatnonzero(labels != -100):
                assert labels[row] == int(item["input_ids"][a + row + 1])
                before = text[: starts[row + 1]]
                assert before.rfind(b"<|im_start|>assistant\n") > before.rfind(b"<|im_start|>user")
        shapes = item["align_kind"].numpy()
        labelled = item["labels"].numpy() != -100
        assert ((shapes > 0) == labelled).all()
        totals += np.bincount(shapes, minlength=len(ALIGNMENTS))
        # rows with teacher targets: the mapped entries and the rest bucket hold the whole mass
        lp, tail = item["topk_logprobs"].double(), item["tail_logmass"].double()
        with_targets = (lp > -np.inf).any(dim=1)
        assert set(shapes[with_targets.numpy()].tolist()) <= {1, 2}
        mass = torch.logsumexp(torch.cat([lp, tail[:, None]], dim=1), dim=1)[with_targets]
        assert mass.abs().max() < 1e-5
        assert (tail[~with_targets] == 0).all()  # no target: the rest bucket holds everything, the divergence is 0
    assert totals[1] > 0 and totals[2] > 0 and totals[3] > 0  # one-to-one, many-to-one, one-to-many all occur
    report = coverage_report(data)
    assert 0 < report.mapped_mass < 1 and 0 < report.one_to_one < 1
    assert sum(report.student_alignments.values()) == pytest.approx(1.0)
    assert report.student_rows == totals[1:].sum()
    assert "of the teacher's top-K mass on mapped tokens" in report.line()


def test_rows_without_targets_add_only_their_cross_entropy(text_spans_cache, space_mark_tokenizer):
    data = CrossTokenizerCache(text_spans_cache, space_mark_tokenizer)
    batch = collate([data[i] for i in range(6)], pad_token_id=space_mark_tokenizer.pad_token_id)
    model = make_tiny_model("llama", len(space_mark_tokenizer), seed=1)
    labels = batch["labels"]
    with_targets = (batch["topk_logprobs"] > -np.inf).any(dim=-1) & (labels != -100)  # (padding holds zeros)
    kept = int((labels != -100).sum())
    assert 0 < int(with_targets.sum()) < kept
    with torch.no_grad():
        every_row = _loss(model, batch, impl="fused", hard_weight=0.0)
        target_rows = _loss(model, batch, labels.masked_fill(~with_targets, -100), impl="fused", hard_weight=0.0,
                            num_items=kept)
    assert float(every_row) == pytest.approx(float(target_rows), rel=1e-6) and float(every_row) > 0


def test_a_cache_without_spans_says_so_in_one_line(tiny_cache, tiny_chat_tokenizer):
    with pytest.raises(ValueError) as err:
        CrossTokenizerCache(tiny_cache, tiny_chat_tokenizer)
    message = str(err.value)
    assert "\n" not in message and "stores no byte spans" in message and "--spans" in message


def test_a_student_tokenizer_that_cannot_be_read_as_bytes_is_refused(text_spans_cache, lowercasing_tokenizer):
    lowered = lowercasing_tokenizer
    with pytest.raises(ValueError) as err:
        CrossTokenizerCache(text_spans_cache, lowered)
    assert str(err.value).startswith("student tokenizer: cannot be read as bytes") and "\n" not in str(err.value)


def test_low_coverage_is_a_warning_with_the_figure(text_spans_cache, space_mark_tokenizer, caplog):
    data = CrossTokenizerCache(text_spans_cache, space_mark_tokenizer)
    with caplog.at_level(logging.WARNING, logger="destila.crosstok"):
        report = coverage_report(data, max_sequences=4)
    assert not caplog.records  # this pair maps most of the mass
    with caplog.at_level(logging.WARNING, logger="destila.crosstok"):
        coverage_report(data, max_sequences=4, warn_below=1.01)
    assert len(caplog.records) == 1 and f"only {100 * report.mapped_mass:.1f}%" in caplog.records[0].getMessage()


def test_uld_items_hold_the_unmapped_entries(text_spans_cache, space_mark_tokenizer):
    data = CrossTokenizerCache(text_spans_cache, space_mark_tokenizer, uld=True, dtype=torch.float64)
    seen = 0
    for index in range(4):
        item = data[index]
        uld, tail = item["uld_logprobs"], item["tail_logmass"]
        assert uld.shape == item["topk_logprobs"].shape
        real = uld > -np.inf
        assert (uld[:, 1:] <= uld[:, :-1]).all()  # descending, -inf padding last
        # the unmapped entries are part of the rest bucket, which also holds the teacher's tail
        assert (torch.logsumexp(uld, dim=1)[real.any(dim=1)] <= tail[real.any(dim=1)] + 1e-12).all()
        seen += int(real.any(dim=1).sum())
    assert seen > 0


def test_a_loss_without_the_rest_bucket_is_refused():
    from destila.crosstok import require_bucket_tail

    require_bucket_tail("bucket")
    for tail in ("renorm", "none"):
        with pytest.raises(ValueError, match=f"found '{tail}'; pass --tail bucket"):
            require_bucket_tail(tail)
