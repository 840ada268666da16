"""The CPU's small products for decoding: either way of taking them gives torch's linear, checked in float64."""

from functools import partial

import pytest
import torch
import torch.nn.functional as F

from destila.draft.head import NarrowHead
from destila.generation import small_matmul as module
from destila.generation.small_matmul import MAX_ROWS, TimedLinear, small_matmul, weight_major_linear


def _oracle(x, weight, bias):
    out = x.double() @ weight.double().T
    return out if bias is None else out + bias.double()


@pytest.mark.parametrize("shape", [(1, 48), (2, 48), (7, 48), (2, 3, 48), (1, 1, 48)])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_weight_major_product_is_torchs_linear_to_float_rounding(shape, with_bias):
    torch.manual_seed(0)
    x, weight = torch.randn(shape), torch.randn(300, 48)
    bias = torch.randn(300) if with_bias else None
    out = weight_major_linear(x, weight, bias)
    assert out.shape == (*shape[:-1], 300) and out.is_contiguous()
    exact = _oracle(x, weight, bias)
    # As close to the float64 product as torch's own float32 linear is (both round 48-term sums).
    torch.testing.assert_close(out.double(), exact, rtol=0, atol=1e-4)
    torch.testing.assert_close(F.linear(x, weight, bias).double(), exact, rtol=0, atol=1e-4)


def test_the_faster_way_is_kept_per_shape_and_row_count(monkeypatch):
    # The timing is made up: one shape is faster torch's way, the other weight-major, as on a real BLAS.
    def fastest(x, layers):
        return "torch" if layers[0][0].shape[0] == 40 else "weight_major"

    monkeypatch.setattr(module, "_fastest", fastest)
    linear = TimedLinear()
    small, large = torch.randn(40, 16), torch.randn(500, 16)
    for rows in (1, 3):
        linear(torch.randn(rows, 16), small)
        linear(torch.randn(rows, 16), large)
    assert linear.choices == {(40, 16, 1, torch.float32): "torch", (40, 16, 3, torch.float32): "torch",
                              (500, 16, 1, torch.float32): "weight_major", (500, 16, 3, torch.float32): "weight_major"}
    assert linear.summary() == {"torch": 2, "weight_major": 2}
    assert linear.listing()["500x16, 3 rows, float32"] == "weight_major"


def test_the_real_timing_picks_a_way_and_both_ways_agree():
    linear = TimedLinear()
    x, weight = torch.randn(2, 64), torch.randn(4096, 64)
    out = linear(x, weight)
    assert list(linear.choices.values())[0] in ("torch", "weight_major")
    torch.testing.assert_close(out.double(), _oracle(x, weight, None), rtol=0, atol=1e-4)


def test_a_shape_is_timed_over_every_layer_of_it_in_the_open_contexts(monkeypatch):
    # One weight timed alone misjudges small shapes; a forward reads all of them in turn, so the timing does too.
    swept = {}

    def fastest(x, layers):
        swept[(layers[0][0].shape, x.shape[0])] = [weight for weight, _ in layers]
        return "weight_major"

    monkeypatch.setattr(module, "_fastest", fastest)
    teacher, draft = _tiny_llama(), _tiny_llama()
    with torch.no_grad(), small_matmul(teacher, draft) as linear:
        teacher(torch.tensor([[3, 4]]))
    down = [block.mlp.down_proj.weight for model in (teacher, draft) for block in model.model.layers]
    assert [id(w) for w in swept[(down[0].shape, 2)]] == [id(w) for w in down]  # both models' 2 layers each
    assert linear.layers == {}  # closed: no weight is held alive by a TimedLinear kept for later
    lone = torch.randn(7, 64)
    linear(torch.randn(1, 64), lone)  # a weight of no open context's layer is timed alone
    assert swept[(lone.shape, 1)] == [lone]


def test_a_sweep_is_bounded_for_a_large_model(monkeypatch):
    weights = [torch.randn(100, 10) for _ in range(5)]  # 4,000 bytes each
    layers = [(w, None) for w in weights]
    monkeypatch.setattr(module, "_SWEEP_BYTES", 12_000)
    assert [w for w, _ in module._sweep(layers)] == weights[:3]
    monkeypatch.setattr(module, "_SWEEP_BYTES", 100)  # one weight larger than the bound is still timed
    assert [w for w, _ in module._sweep(layers)] == weights[:1]


def test_prefills_and_gradients_are_left_to_torch():
    linear = TimedLinear()
    weight = torch.randn(30, 8, requires_grad=True)
    linear(torch.randn(MAX_ROWS + 1, 8), weight.detach())  # a prompt's prefill
    x = torch.randn(2, 8)
    linear(x, weight).sum().backward()  # training: autograd through torch's own linear
    assert linear.choices == {} and weight.grad is not None
    class Wrapped(torch.Tensor):  # stands for a quantized weight, which brings its own linear
        pass

    linear(torch.randn(2, 8), weight.detach().as_subclass(Wrapped))
    assert linear.choices == {}
    fixed = TimedLinear("torch")
    fixed(torch.randn(2, 8), weight.detach())
    assert fixed.choices == {(30, 8, 2, torch.float32): "torch"}
    with pytest.raises(ValueError, match="expected a way of torch, weight_major or None"):
        TimedLinear("fast")


def _tiny_llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("way", [None, "weight_major"])
def test_a_model_in_the_context_gives_its_own_logits_and_is_restored_after(way):
    model = _tiny_llama()
    exact = _tiny_llama().double()
    ids = torch.randint(0, 300, (1, 5))
    with torch.no_grad():
        expected = exact(ids[:, -2:]).logits
        plain = model(ids[:, -2:]).logits
        with small_matmul(model, way=way) as linear:
            inside = model(ids[:, -2:]).logits  # 2 rows: a decoding step's width
        after = model(ids[:, -2:]).logits
    assert (inside.double() - expected).abs().max() <= 2 * (plain.double() - expected).abs().max() + 1e-6
    assert torch.equal(plain, after)
    assert len(linear.choices) >= 4  # q, k/v, o, the MLP's two shapes and the head: every small product went through
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_a_narrow_head_takes_the_swapped_product_and_gets_its_own_back():
    head = NarrowHead(torch.nn.Linear(16, 50), [4, 9, 1])
    model = torch.nn.Sequential(head)
    with small_matmul(model, model, way="weight_major") as linear:  # given twice: swapped and restored once
        assert head.linear is linear
        head(torch.randn(1, 16))
    assert head.linear is F.linear and "linear" not in head.__dict__
    assert linear.choices == {(3, 16, 1, torch.float32): "weight_major"}


def test_the_layers_are_restored_when_the_block_fails():
    model = _tiny_llama()
    with pytest.raises(RuntimeError, match="boom"):
        with small_matmul(model):
            raise RuntimeError("boom")
    assert all("forward" not in m.__dict__ for m in model.modules())


def test_generate_inside_the_context_writes_the_same_greedy_text():
    # docs/draft.md's use: any generate call, here with prompt lookup, inside small_matmul(teacher).
    model = _tiny_llama()
    ids = torch.tensor([[5, 9, 5, 9, 5, 17, 23, 5, 9]])
    options = {"max_new_tokens": 12, "do_sample": False, "pad_token_id": 0}
    plain = model.generate(ids, **options)
    with small_matmul(model) as linear:
        looked_up = model.generate(ids, prompt_lookup_num_tokens=1, **options)
    assert torch.equal(plain, looked_up) and linear.choices


def test_a_layer_another_library_already_wraps_keeps_its_forward_and_is_counted():
    model = _tiny_llama()
    layers = [block.mlp.down_proj for block in model.model.layers]  # the only layers of their shape
    for layer in layers:  # as accelerate's hooks do
        layer.forward = partial(torch.nn.functional.linear, weight=layer.weight)
    theirs = [layer.forward for layer in layers]
    with torch.no_grad(), small_matmul(model) as linear:
        model(torch.tensor([[3, 4]]))
    assert linear.wrapped_layers == len(layers) == 2 and [layer.forward for layer in layers] == theirs
    assert (layers[0].out_features, layers[0].in_features, 2, torch.float32) not in linear.choices
