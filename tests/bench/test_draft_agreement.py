"""The draft benchmark's agreement estimate: exact on cases whose answer is known."""

import pytest
import torch

from benchmarks.draft_agreement import agreement, table


def test_a_draft_that_is_the_teacher_agrees_everywhere_and_a_uniform_one_as_its_overlap_says():
    torch.manual_seed(0)
    answers = [{"ids": [5, 1, 2, 3], "start": 1}, {"ids": [7, 7, 0], "start": 2}]  # 3 and 1 answer positions
    teacher = [torch.softmax(torch.randn(3, 6), -1), torch.softmax(torch.randn(1, 6), -1)]
    teacher[0][torch.arange(3), torch.tensor([1, 2, 3])] += 1.0  # the answer's tokens are the teacher's top ones
    teacher[1][0, 0] += 1.0
    teacher = [p / p.sum(-1, keepdim=True) for p in teacher]
    assert agreement(teacher, teacher, answers) == {"greedy": 1.0, "sampling": 1.0, "positions": 4}
    uniform = [torch.full_like(p, 1 / 6) for p in teacher]
    expected = torch.cat([torch.minimum(p.double(), torch.tensor(1 / 6)).sum(-1) for p in teacher]).mean().item()
    found = agreement(teacher, uniform, answers)
    assert found["sampling"] == pytest.approx(expected, abs=1e-4) and found["sampling"] < 1
    # A uniform draft's top token is its first (argmax takes the first of ties): token 0, the answer once in 4.
    assert found["greedy"] == 0.25


def test_the_table_gives_each_draft_its_mean_over_seeds():
    records = [{"row": "kd-answers-16x", "layers": 2, "seed": s, "greedy": g, "sampling": 0.4, "prompts": 48}
               for s, g in ((0, 0.37), (1, 0.35))] + [
              {"row": "cut", "layers": 2, "seed": 0, "greedy": 0.01, "sampling": 0.02, "prompts": 48}]
    lines = table(records).splitlines()
    assert lines[2] == "| 2 | cut | 1 | 0.010 | 0.020 |"
    assert lines[3] == "| 2 | kd-answers-16x | 2 | 0.360 ± 0.010 | 0.400 ± 0.000 |"
