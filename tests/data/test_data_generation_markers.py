"""Templates with `{% generation %}` markers give the assistant mask themselves, as TRL uses them."""

import pytest
from conftest import train_tiny_tokenizer

from destila.data import DataSpec
from destila.data.render import encoder

# A reasoning-style template: earlier assistant turns lose their thoughts, so the text before a turn changes.
REWRITING = (
    "{% for message in messages %}{% if message['role'] == 'assistant' %}{{ '<|im_start|>assistant\\n' }}"
    "{% if loop.last %}{% set content = message['content'] %}"
    "{% else %}{% set content = message['content'].split('</think>')[-1] %}{% endif %}"
    "{{ content + '<|im_end|>' }}{{ '\\n' }}"
    "{% else %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
MARKED = REWRITING.replace("{{ content + '<|im_end|>' }}",
                           "{% generation %}{{ content + '<|im_end|>' }}{% endgeneration %}")
CHAT = [{"role": "user", "content": "Two plus two?"},
        {"role": "assistant", "content": "<think>add them</think>Four."},
        {"role": "user", "content": "And three?"},
        {"role": "assistant", "content": "<think>one more</think>Five."}]


def encode(template):
    tokenizer = train_tiny_tokenizer(chat=True)
    tokenizer.chat_template = template
    spec = DataSpec("x.jsonl", messages_field="messages")
    return tokenizer, encoder(spec, tokenizer)({"messages": [CHAT]})


def test_a_rewriting_template_without_markers_is_refused_with_the_way_out():
    with pytest.raises(ValueError, match=r"\{% generation %\}.*or pass --loss-on all"):
        encode(REWRITING)


def test_generation_markers_give_exactly_the_assistant_tokens():
    tokenizer, encoded = encode(MARKED)
    ids, targets = encoded["input_ids"][0], encoded["targets"][0]
    trained = tokenizer.decode([t for t, keep in zip(ids, targets) if keep])
    assert trained == "Four.<|im_end|><think>one more</think>Five.<|im_end|>"
    assert tokenizer.decode(ids) == tokenizer.apply_chat_template(CHAT, tokenize=False)
