"""A 1B-class Llama teacher with random weights (bf16, on the GPU), for the GPU check's end-to-end step.

    python benchmarks/gpu/random_teacher.py OUT TOKENIZER_DIR

Built from a config in code (hidden 2048, 16 layers, 32 heads / 8 KV heads, untied head), with the
tokenizer saved by `make gpu-wheels` (the embedded SmolLM2's, vocabulary 49152): nothing is downloaded.
"""

import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig


def main(out: str, tokenizer_dir: str) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                         num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                         tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    print(f"teacher: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":
    main(*sys.argv[1:3])
