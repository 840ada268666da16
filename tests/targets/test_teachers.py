"""TeacherSet: one teacher equals the head alone; stored hidden states equal transformers' own, projected."""

import pytest
import torch
from conftest import make_tiny_model, mixture_rows

from destila.models import decoder_of, output_head
from destila.targets.head import teacher_topk
from destila.targets.mixture import mixture_topk
from destila.targets.teachers import HiddenSpec, TeacherSet


@pytest.fixture(scope="module")
def teachers(tiny_tokenizer):
    return [make_tiny_model("llama", len(tiny_tokenizer), seed=1, hidden=32),
            make_tiny_model("llama", len(tiny_tokenizer), seed=3, hidden=32)]


def test_one_teacher_and_a_mixture(teachers):
    ids = torch.randint(1, 300, (2, 13))
    mask = torch.rand(2, 13) < 0.6
    got = TeacherSet(teachers[:1], None, top_k=6).positions(ids, mask)
    hidden = decoder_of(teachers[0])(input_ids=ids).last_hidden_state[mask]
    want = teacher_topk(hidden, *output_head(teachers[0]), 6)
    assert torch.equal(got["ids"], want[0])
    assert torch.equal(got["tail"], want[2])
    mixed = TeacherSet(teachers, [0.7, 0.3], top_k=6).positions(ids, mask)
    hiddens = [decoder_of(t)(input_ids=ids).last_hidden_state[mask] for t in teachers]
    direct = mixture_topk(hiddens, [output_head(t) for t in teachers], [0.7, 0.3], 6)
    assert all(torch.equal(a, b) for a, b in zip((mixed["ids"], mixed["logprobs"], mixed["tail"]), direct))
    with pytest.raises(ValueError, match="one weight per teacher"):
        TeacherSet(teachers, [1.0], top_k=6)


@pytest.mark.parametrize("dim, projection", [(None, "identity"), (8, "orthogonal")])
def test_hidden_states_are_projected_layer_outputs(teachers, dim, projection):
    spec = HiddenSpec.parse("0,2", dim)
    assert spec.projection == projection
    ids = torch.randint(1, 300, (2, 13))
    got = mixture_rows(teachers[:1], None, ids, k=6, hidden=spec)["hidden"]
    states = teachers[0](input_ids=ids, output_hidden_states=True).hidden_states
    q = spec.matrix(32)
    want = torch.stack([states[1] @ q, states[3] @ q], dim=2).flatten(0, 1)
    assert got.dtype == torch.float16 and got.shape == (2 * 13, 2, dim or 32)
    assert torch.allclose(got.float(), want, atol=2e-3, rtol=1e-3)
    assert spec.record(32) == {"layers": [0, 2], "dim": dim or 32, "projection": projection, "seed": 0}
    with pytest.raises(ValueError, match="layers 0..3"):
        TeacherSet(teachers[:1], None, top_k=6, hidden=HiddenSpec((4,)))
