"""One batch of answers, each sample drawn from its own random stream.

``transformers``' sampling draws every row's token from one global random
state, so a prompt's answer would change with the prompts batched beside it
and with where a previous run stopped. Here ``generate`` runs in greedy mode
with one extra logits processor, :class:`OwnStreamSampler`, that samples each
row itself: temperature and top-p through transformers' own warpers, then the
exponential race ``argmax_j (log p_j − log E_j)``, ``E_j ~ Exp(1)`` drawn
from the row's generator (which picks ``j`` with probability ``p_j``), and
returns a one-hot score row that greedy decoding then follows.
"""

from __future__ import annotations

import hashlib

import torch
from transformers import GenerationConfig, LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper


def stream_seed(seed: int, prompt_index: int, sample: int) -> int:
    """A 63-bit seed for one answer, a hash of ``(seed, prompt_index, sample)``."""
    digest = hashlib.sha256(f"destila-generate/{seed}/{prompt_index}/{sample}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


class OwnStreamSampler(LogitsProcessor):
    """Sample row r of the scores ``[R, V]`` with ``generators[r]``; returns 0 at the pick, -inf elsewhere.

    Naive equivalent, with one global random state::

        probs = softmax(top_p_filter(scores / temperature))
        pick = torch.multinomial(probs, 1)
    """

    def __init__(self, generators: list[torch.Generator], temperature: float, top_p: float):
        self.generators = generators
        self.warpers = [TemperatureLogitsWarper(temperature)]
        if top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(top_p))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.float()
        for warp in self.warpers:
            scores = warp(input_ids, scores)
        log_p = torch.log_softmax(scores, dim=-1)
        picks = torch.empty(scores.shape[0], dtype=torch.long, device=scores.device)
        for row, generator in enumerate(self.generators):
            noise = torch.empty(scores.shape[1], device=scores.device).exponential_(generator=generator)
            picks[row] = torch.argmax(log_p[row] - noise.log())
        one_hot = torch.full_like(scores, float("-inf"))
        one_hot.scatter_(1, picks[:, None], 0.0)
        return one_hot


def stop_ids(model, tokenizer) -> list[int]:
    """The token ids that end an answer: the model's generation config's, plus its tokenizer's end-of-sequence."""
    ids = model.generation_config.eos_token_id
    ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    if not ids:
        raise ValueError("teacher: neither its generation config nor its tokenizer names an end-of-sequence token")
    return ids


def render(prompt, tokenizer, use_template: bool) -> str:
    """The prompt as the teacher reads it: the chat template with a generation prompt, or the raw text."""
    if use_template:
        return tokenizer.apply_chat_template(prompt.conversation(), add_generation_prompt=True, tokenize=False)
    return prompt.text


@torch.no_grad()
def answer_batch(model, tokenizer, prompts, indices: list[int], spec, use_template: bool) -> list[dict]:
    """``spec.num_return_sequences`` answers for each prompt, as output records in prompt order.

    Prompts are left-padded into one ``[R, L]`` batch (``R`` = prompts ×
    samples); the answer is decoded up to its end-of-sequence token.
    """
    n = spec.num_return_sequences
    texts = [render(p, tokenizer, use_template) for p in prompts]
    # The chat template already wrote any special tokens; raw text is read as the cache packs it (none added).
    encoded = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    stop = stop_ids(model, tokenizer)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else stop[0]
    width = max(len(ids) for ids in encoded)
    device = next(model.parameters()).device
    input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
    attention = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, ids in enumerate(encoded):
        input_ids[row, width - len(ids):] = torch.tensor(ids, dtype=torch.long)
        attention[row, width - len(ids):] = 1
    input_ids = input_ids.repeat_interleave(n, 0).to(device)
    attention = attention.repeat_interleave(n, 0).to(device)
    processors = []
    if spec.temperature > 0:
        generators = [torch.Generator(device=device).manual_seed(stream_seed(spec.seed, i, s))
                      for i in indices for s in range(n)]
        processors.append(OwnStreamSampler(generators, spec.temperature, spec.top_p))
    # Only these settings: the teacher's own generation defaults (top_k, repetition penalty, ...)
    # would add processors of their own and change what is sampled.
    config = GenerationConfig(do_sample=False, num_beams=1, max_new_tokens=spec.max_new_tokens,
                              pad_token_id=pad, eos_token_id=stop)
    saved, model.generation_config = model.generation_config, config
    try:
        output = model.generate(input_ids=input_ids, attention_mask=attention, generation_config=config,
                                logits_processor=processors)
    finally:
        model.generation_config = saved
    records = []
    for row in range(output.shape[0]):
        prompt_number, sample = divmod(row, n)
        new = output[row, width:].tolist()
        cut = next((k for k, token in enumerate(new) if token in stop), len(new))
        answer = tokenizer.decode(new[:cut], skip_special_tokens=True)
        prompt = prompts[prompt_number]
        records.append({
            "messages": [*prompt.conversation(), {"role": "assistant", "content": answer}],
            "text": texts[prompt_number] + answer,
            "prompt_index": indices[prompt_number],
            "sample": sample,
            "finished": cut < len(new),
        })
    return records
