"""Captured layer outputs equal transformers' own hidden_states, for Llama and GPT-2."""

import torch

from destila.models import final_hidden_states
from destila.targets.layers import capture_layer_outputs, layer_count


def test_capture_matches_output_hidden_states(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    input_ids = torch.randint(1, 300, (2, 11))
    want = model(input_ids=input_ids, output_hidden_states=True).hidden_states
    assert layer_count(model) == len(want) - 1 == 4
    with capture_layer_outputs(model, [0, 2]) as got:
        final = final_hidden_states(model, input_ids)
    assert sorted(got) == [0, 2]
    assert torch.allclose(got[0], want[1], atol=1e-6) and torch.allclose(got[2], want[3], atol=1e-6)
    assert torch.allclose(final, want[-1], atol=1e-6)
    # Hooks are gone after the block.
    with capture_layer_outputs(model, [1]) as again:
        pass
    model(input_ids=input_ids)
    assert again == {}
