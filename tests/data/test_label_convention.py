"""One label convention from collate to the loss: position t is scored on token t+1, whoever reads the batch.

The collate makes the labels position-aligned once; the training loss, the
Trainer's divisor, the held-out metrics and the cross-tokenizer rows read
them as they are. A second shift planted anywhere on those paths moves every
label by one position, and the cross-entropies below, computed from the rows
alone (input ids, and the positions the teacher has targets for; no label
read), stop matching. The structural guard keeps the shift itself in one module.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from destila.cache import TopKCache
from destila.data import collate
from destila.eval.quality import metrics_from_sums, quality_sums
from destila.training import DistillationArguments, DistillationTrainer

SRC = Path(__file__).parents[2] / "src" / "destila"
ROWS = 4


def naive_next_token_ce(model, items) -> tuple[float, int]:
    """Mean −log q(token t+1) over the positions t < L−1 the cache holds a teacher target for, and their count."""
    total, count = 0.0, 0
    with torch.no_grad():
        for item in items:
            ids, trained = item["input_ids"].long(), torch.isfinite(item["topk_logprobs"][:, 0])
            logits = model(input_ids=ids[None], position_ids=item["position_ids"][None].long()).logits[0].double()
            logq = torch.log_softmax(logits, -1)
            for t in range(len(ids) - 1):  # the last position has no next token
                if trained[t]:
                    total -= float(logq[t, ids[t + 1]])
                    count += 1
    return total / count, count


@pytest.fixture()
def hard_only_trainer(tiny_cache, fresh_student, tmp_path):
    """A trainer whose loss is the cross-entropy on the labels alone."""
    args = DistillationArguments(output_dir=str(tmp_path / "out"), soft_weight=0.0, hard_weight=1.0,
                                 per_device_eval_batch_size=ROWS, save_strategy="no", report_to="none", max_steps=1)
    cache = TopKCache(tiny_cache)
    return DistillationTrainer(model=str(fresh_student), args=args, train_dataset=cache,
                               eval_dataset=torch.utils.data.Subset(cache, range(ROWS)))


def test_training_evaluation_and_the_divisor_score_position_t_on_token_t_plus_1(hard_only_trainer, tiny_cache):
    trainer = hard_only_trainer
    items = [TopKCache(tiny_cache)[i] for i in range(ROWS)]
    model = trainer.model.eval()
    expected, count = naive_next_token_ce(model, items)
    batch = collate(items)
    assert int(trainer._get_num_items_in_batch([batch], "cpu")) == count  # the Trainer's divisor
    with torch.no_grad():
        loss = trainer.compute_loss(model, batch)
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert trainer.evaluate()["eval_ce"] == pytest.approx(expected, rel=1e-5)
    metrics = metrics_from_sums(quality_sums(model, [batch]))  # destila eval's figures
    assert metrics["tokens"] == count
    assert metrics["cross_entropy"] == pytest.approx(expected, rel=1e-5)


# A label shift written by hand: an assignment into a *labels* name sliced by one position, or a roll of one.
_SHIFT = re.compile(r"label\w*\s*\[[^\]]*(?::-1|\b1:)\s*\]\s*=|label\w*.*\.roll\(|roll\(.*label")
# The one module that shifts labels, and the functions that convert between the two conventions.
_SHIFTS_HERE = "data/collate.py"
_CONVERSIONS = re.compile(r"\b(shift_labels|next_token_labels|hf_labels)\(")
# Who may call them: item producers (the cache's stored mask, the student's rows across tokenizers, the bytes
# each label spells) shift through the same function; hf_labels only where Hugging Face's code reads labels.
_CALLERS = {"cache/rows.py": {"next_token_labels"}, "crosstok/dataset.py": {"shift_labels"},
            "eval/cross.py": {"shift_labels"}, "training/trainer.py": {"hf_labels"}}


def hand_written_shifts(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if _SHIFT.search(line) and not line.lstrip().startswith("#")]


def conversions(text: str) -> set[str]:
    return {match.group(1) for line in text.splitlines() if not line.lstrip().startswith(("#", "def "))
            for match in _CONVERSIONS.finditer(line)}


def test_labels_are_shifted_in_one_module_only():
    found, called = {}, {}
    for path in sorted(SRC.rglob("*.py")):
        name, text = path.relative_to(SRC).as_posix(), path.read_text(encoding="utf-8")
        if name == _SHIFTS_HERE:
            continue
        if hand_written_shifts(text):
            found[name] = hand_written_shifts(text)
        if conversions(text) - _CALLERS.get(name, set()):
            called[name] = sorted(conversions(text) - _CALLERS.get(name, set()))
    assert found == {}, f"labels shifted outside {_SHIFTS_HERE}: use destila.data.collate's functions"
    assert called == {}, "label conversions called where the batch's labels are to be read as they are"


def test_a_planted_shift_and_a_planted_conversion_are_found():
    assert hand_written_shifts("    labels[:-1] = ids[1:]\n") == ["labels[:-1] = ids[1:]"]
    assert hand_written_shifts("    out_labels[..., 1:] = aligned[..., :-1]\n")
    assert hand_written_shifts("    labels = torch.roll(batch['labels'], -1, dims=-1)\n")
    assert not hand_written_shifts("    mask[:-1] = targets  # not labels\n")
    assert conversions("    labels = hf_labels(batch['labels'])\n") == {"hf_labels"}
    assert conversions("def shift_labels(x):\n") == set()
