"""A teacher with random weights, for the GPU check's steps (bf16 on a GPU, float32 on CPU).

    python benchmarks/gpu/random_teacher.py OUT TOKENIZER_DIR                  # 1B-class Llama, untied head
    python benchmarks/gpu/random_teacher.py OUT TOKENIZER_DIR --config DIR     # DIR's architecture, e.g. the
                                                                               # embedded teacher's (.gpu/smollm2-config)

The 1B-class default is built from a config in code (hidden 2048, 16 layers, 32 heads / 8 KV heads, untied
head); ``--config`` copies a saved model config instead: the GPU machines cannot receive the embedded
teacher's 94 MB of weights (at most 64 MiB travel with a run), so its architecture runs there with random
weights, which time the same. The tokenizer is the one ``make gpu-wheels`` saved (the embedded SmolLM2's,
vocabulary 49152): nothing is downloaded. The saved config carries ``destila_random_weights: true``, so that
what is measured on it can say which weights ran.
"""

import argparse

import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, LlamaConfig


def one_billion_config(vocab_size: int) -> LlamaConfig:
    return LlamaConfig(vocab_size=vocab_size, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
                       num_attention_heads=32, num_key_value_heads=8, max_position_embeddings=8192,
                       tie_word_embeddings=False, bos_token_id=1, eos_token_id=2)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python benchmarks/gpu/random_teacher.py", description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder to write the model and tokenizer to")
    parser.add_argument("tokenizer", help="tokenizer folder")
    parser.add_argument("--config", help="a model folder (or its config.json) whose architecture to copy")
    args = parser.parse_args(argv)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = AutoConfig.from_pretrained(args.config) if args.config else one_billion_config(len(tokenizer))
    config.destila_random_weights = True
    cuda = torch.cuda.is_available()
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16 if cuda else torch.float32)
    print(f"teacher: {sum(p.numel() for p in model.parameters()) / 1e9:.2f} B parameters, random weights")
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)


if __name__ == "__main__":
    main()
