"""Tiny random teachers of the families a student can be cut and pruned from: Llama, Qwen2, Qwen3.

Qwen2 and Qwen3 get sliding-window layers from layer 3 on, so their config
holds a per-layer ``layer_types`` list that every cut must follow.
"""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM

FAMILIES = ("llama", "qwen2", "qwen3")


def tiny_config(family: str, vocab_size: int, layers: int = 6, hidden: int = 32, heads: int = 4, kv_heads: int = 2):
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    common = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=256,
                  tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    if family == "llama":
        return LlamaConfig(**common)
    # Sliding-window layers from layer 3 on: layer_types is a per-layer list the cut must follow.
    sliding = dict(use_sliding_window=True, sliding_window=8, max_window_layers=3)
    if family == "qwen2":
        return Qwen2Config(**common, **sliding)
    return Qwen3Config(**common, **sliding, head_dim=hidden // heads)


def make_teacher(family: str, vocab_size: int, identity: tuple[int, ...] = (), seed: int = 0, **shape):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(tiny_config(family, vocab_size, **shape))
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)  # peaked distributions, as in conftest
        for index in identity:
            layer = model.model.layers[index]
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
    return model.eval()


def save_teacher(path, tokenizer, family: str, **kwargs):
    make_teacher(family, len(tokenizer), **kwargs).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
