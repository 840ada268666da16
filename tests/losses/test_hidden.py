"""Hidden-state loss: float64 gradient check, the naive formula, layer maps, the fixed projection."""

import pytest
import torch

from destila.losses.hidden_state_loss import HiddenStateLoss, fixed_projection, hidden_state_loss
from destila.training.hidden_distillation import parse_layer_map


@pytest.mark.parametrize("distance", ["nmse", "mse", "cosine"])
def test_gradcheck_float64(distance):
    torch.manual_seed(0)
    student = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    teacher = torch.randn(2, 5, 3, dtype=torch.float64)
    projection = torch.randn(3, 7, dtype=torch.float64, requires_grad=True)
    mask = torch.rand(2, 5) > 0.3

    def loss(s, p):
        return hidden_state_loss(s @ p.T, teacher, distance, mask)

    assert torch.autograd.gradcheck(loss, (student, projection), eps=1e-6, atol=1e-8)


@pytest.mark.parametrize("distance", ["nmse", "mse", "cosine"])
def test_module_equals_the_naive_formula(distance):
    torch.manual_seed(1)
    pairs = [(0, 1), (2, 5)]
    module = HiddenStateLoss(pairs, student_width=6, target_width=4, distance=distance).double()
    students = [torch.randn(3, 8, 6, dtype=torch.float64) for _ in pairs]
    teachers = [torch.randn(3, 8, 4, dtype=torch.float64) for _ in pairs]
    mask = torch.rand(3, 8) > 0.5
    got = module(students, teachers, mask)
    want = 0.0
    for projection, s, t in zip(module.projections, students, teachers):
        s = s @ projection.weight.T
        if distance == "nmse":
            kept = t[mask]  # [N, D]: the teacher's variance per dimension over masked-in positions
            variance = ((kept - kept.mean(0)) ** 2).mean(0)
            rows = ((s - t) ** 2 / variance).mean(-1)
        elif distance == "mse":
            rows = ((s - t) ** 2).mean(-1)
        else:
            rows = 1 - (s * t).sum(-1) / (s.norm(dim=-1) * t.norm(dim=-1))
        want = want + rows[mask].mean()
    assert torch.allclose(got, want / 2, atol=1e-12)
    # Equal widths: no projection to learn; identical states give exactly zero.
    same = HiddenStateLoss(pairs, 4, 4, distance)
    assert list(same.parameters()) == []
    assert same(teachers, teachers, mask).item() == pytest.approx(0.0, abs=1e-12)
    # Every position masked out: zero, not NaN.
    assert module(students, teachers, torch.zeros(3, 8, dtype=torch.bool)).item() == 0.0


def test_layer_maps():
    assert parse_layer_map("auto", 6, 30) == [(0, 0), (1, 6), (2, 12), (3, 17), (4, 23), (5, 29)]
    assert parse_layer_map("s0:t0,s1:t6", 2, 30) == [(0, 0), (1, 6)]
    assert parse_layer_map("0:3, 1:7", 2, 8) == [(0, 3), (1, 7)]
    with pytest.raises(ValueError, match="out of range"):
        parse_layer_map("s0:t30", 6, 30)
    with pytest.raises(ValueError, match="pairs like"):
        parse_layer_map("s0-t1", 6, 30)
    with pytest.raises(ValueError, match="appears twice"):
        parse_layer_map("s0:t1,s0:t2", 6, 30)


def test_fixed_projection_is_seeded_and_orthonormal():
    q = fixed_projection(16, 5, seed=3)
    assert q.shape == (16, 5)
    assert torch.allclose(q.T @ q, torch.eye(5), atol=1e-6)
    assert torch.equal(q, fixed_projection(16, 5, seed=3))
    assert not torch.equal(q, fixed_projection(16, 5, seed=4))
    assert torch.equal(fixed_projection(8, 8, "identity"), torch.eye(8))
    with pytest.raises(ValueError, match="identity projection keeps the width"):
        fixed_projection(8, 4, "identity")


def test_nmse_is_scale_free_and_about_one_for_a_student_that_knows_nothing():
    """nmse is the same whatever the states' scale, where mse grows with its square; a student that only
    predicts the teacher's mean scores exactly 1."""
    torch.manual_seed(2)
    teacher = 40.0 * torch.randn(4, 16, 8, dtype=torch.float64) + 3.0
    student = teacher + 25.0 * torch.randn(4, 16, 8, dtype=torch.float64)
    for scale in (1e-3, 1.0, 1e3):
        assert hidden_state_loss(scale * student, scale * teacher, "nmse").item() == pytest.approx(
            hidden_state_loss(student, teacher, "nmse").item(), rel=1e-9)
    assert hidden_state_loss(1e3 * student, 1e3 * teacher, "mse").item() == pytest.approx(
        1e6 * hidden_state_loss(student, teacher, "mse").item(), rel=1e-9)
    mean_only = teacher.reshape(-1, 8).mean(0).expand_as(teacher)
    assert hidden_state_loss(mean_only, teacher, "nmse").item() == pytest.approx(1.0, rel=1e-9)


def test_the_old_keyword_kind_still_names_the_distance():
    torch.manual_seed(2)
    student, teacher = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    assert hidden_state_loss(student, teacher, kind="mse").item() == hidden_state_loss(student, teacher, "mse").item()
    assert HiddenStateLoss([(0, 0)], 4, 4, kind="cosine").distance == "cosine"
