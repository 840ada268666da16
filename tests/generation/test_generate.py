"""`destila generate`: sampling from per-answer streams, conversations out, resume after SIGKILL.

The kill test runs ``python -m destila generate`` in real subprocesses with one
thread, killed twice with SIGKILL mid-run, and compares the finished file
byte for byte with an uninterrupted in-process run (also one thread).
"""

import json
import subprocess
import sys

import pytest
import torch
from conftest import ENV, pydoc_texts, run_and_kill, save_tiny_model

from destila.generation import GenerateSpec, SamplingSpec, generate
from destila.generation.run import sidecar_path
from destila.generation.sampling import OwnStreamSampler

CHAT_TEMPLATE = (
    "{% for m in messages %}<|endoftext|>{{ m['role'] }}\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|endoftext|>assistant\n{% endif %}"
)


def prompt_lines(count: int) -> list[str]:
    lines = [line.strip()[:60] for text in pydoc_texts(40) for line in text.splitlines() if len(line.strip()) > 20]
    return lines[:count]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, tiny_tokenizer):
    """A tiny Llama, wide enough that a run lasts long enough to be killed mid-way."""
    path = tmp_path_factory.mktemp("gen-llama")
    save_tiny_model(path, tiny_tokenizer, layers=6, hidden=128)
    return path


@pytest.fixture(scope="module")
def chat_teacher(tmp_path_factory, tiny_tokenizer):
    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("gen-chat")
    save_tiny_model(path, tiny_tokenizer)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    return path


def test_own_stream_sampler_follows_the_warped_distribution():
    torch.manual_seed(0)
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -30.0]])
    rows = 4000
    generators = [torch.Generator().manual_seed(i) for i in range(rows)]
    scores = OwnStreamSampler(generators, temperature=1.0, top_p=1.0)(None, logits.expand(rows, -1).clone())
    assert torch.isinf(scores).sum(1).eq(4).all()  # exactly one finite entry per row
    counts = torch.bincount(scores.argmax(1), minlength=5).double() / rows
    expected = torch.softmax(logits[0].double(), 0)
    # Binomial standard error at n=4000 is below 0.008; 0.03 is ~4 sigma.
    assert torch.allclose(counts, expected, atol=0.03), (counts, expected)
    # top_p = 0.6 keeps tokens 0 and 1 only (p ≈ 0.64, 0.24): the nucleus reaching 0.6.
    nucleus = OwnStreamSampler(generators, temperature=1.0, top_p=0.6)(None, logits.expand(rows, -1).clone())
    assert set(nucleus.argmax(1).tolist()) <= {0, 1}
    # Same generator seeds, same picks: the stream, not a global state, decides.
    again = OwnStreamSampler([torch.Generator().manual_seed(i) for i in range(rows)], 1.0, 1.0)
    torch.manual_seed(123)
    assert torch.equal(again(None, logits.expand(rows, -1).clone()).argmax(1), scores.argmax(1))


def test_conversations_with_chat_template_and_cache_build_reads_the_text(chat_teacher, tmp_path):
    from destila.cache import TopKCache, build_cache

    prompts = tmp_path / "prompts.jsonl"
    rows = [
        {"messages": [{"role": "user", "content": "What does len do?"}]},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "And range?"},
                      {"role": "assistant", "content": "an old answer, to be replaced"}]},
    ]
    prompts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "answers.jsonl"
    sampling = SamplingSpec(max_new_tokens=12, temperature=0.8, num_return_sequences=2, seed=3)
    report = generate(GenerateSpec(str(chat_teacher), prompts, out, sampling, batch_size=2, progress=False))
    assert (report.prompts, report.written_prompts, report.lines) == (2, 2, 4)
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["prompt_index"], r["sample"]) for r in records] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for record in records:
        *asked, answer = record["messages"]
        assert answer["role"] == "assistant" and answer["content"] != "an old answer, to be replaced"
        assert asked[-1]["role"] == "user"
        assert record["text"].startswith("<|endoftext|>") and record["text"].endswith(answer["content"])
    assert records[2]["messages"][0] == {"role": "system", "content": "Be brief."}
    # The two samples of a prompt come from different streams.
    assert records[0]["messages"][-1] != records[1]["messages"][-1]
    # Running again is a no-op; the text field feeds the cache builder directly.
    assert generate(GenerateSpec(str(chat_teacher), prompts, out, sampling, progress=False)).written_prompts == 0
    cache = build_cache(str(chat_teacher), out, tmp_path / "cache", text_field="text", seq_len=16, top_k=4,
                        progress=False)
    assert cache.complete and len(TopKCache(tmp_path / "cache")) == cache.sequences > 0


def test_refusals(chat_teacher, teacher, tmp_path):
    with pytest.raises(ValueError, match="chat template"):
        generate(GenerateSpec(str(teacher), [[{"role": "user", "content": "hi"}]], tmp_path / "a.jsonl",
                              progress=False))
    with pytest.raises(ValueError, match="greedy"):
        SamplingSpec(temperature=0, num_return_sequences=2)
    foreign = tmp_path / "foreign.jsonl"
    foreign.write_text('{"text": "mine"}\n')
    with pytest.raises(FileExistsError, match="not written by destila generate"):
        generate(GenerateSpec(str(teacher), ["hello"], foreign, progress=False))
    assert foreign.read_text() == '{"text": "mine"}\n'  # untouched
    out = tmp_path / "b.jsonl"
    generate(GenerateSpec(str(teacher), ["hello", "world"], out, SamplingSpec(max_new_tokens=2), progress=False))
    before = out.read_bytes()
    with pytest.raises(ValueError, match=r"max_new_tokens: 2 before, 3 now"):
        generate(GenerateSpec(str(teacher), ["hello", "world"], out, SamplingSpec(max_new_tokens=3), progress=False))
    assert out.read_bytes() == before


def test_cut_off_tail_is_rewritten_whole(teacher, tmp_path):
    sampling = SamplingSpec(max_new_tokens=6, num_return_sequences=2, seed=1)
    prompts = prompt_lines(5)
    want = tmp_path / "want.jsonl"
    generate(GenerateSpec(str(teacher), prompts, want, sampling, batch_size=2, progress=False))
    lines = want.read_bytes().splitlines(keepends=True)
    assert len(lines) == 10
    # A kill in the middle of a batch's write: the first 7 lines and half of the 8th (prompts 0-2 whole,
    # prompt 3 cut: batch [2, 3] is recomputed whole and only prompt 3 is written again).
    got = tmp_path / "got.jsonl"
    sidecar_path(want).rename(sidecar_path(got))
    got.write_bytes(b"".join(lines[:7]) + lines[7][:17])
    report = generate(GenerateSpec(str(teacher), prompts, got, sampling, batch_size=2, progress=False))
    assert (report.already_done, report.written_prompts) == (3, 2)  # prompt 3's lone line and the cut one dropped
    assert got.read_bytes() == b"".join(lines)


def _count_lines(path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0



@pytest.mark.slow
def test_killed_twice_then_resumed_equals_an_uninterrupted_run(teacher, tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(prompt_lines(30)) + "\n")
    flags = ["--max-new-tokens", "24", "--temperature", "0.9", "--top-p", "0.95", "--num-return-sequences", "2",
             "--seed", "7", "--batch-size", "2"]
    want = tmp_path / "want.jsonl"
    sampling = SamplingSpec(max_new_tokens=24, temperature=0.9, top_p=0.95, num_return_sequences=2, seed=7)
    generate(GenerateSpec(str(teacher), prompts, want, sampling, batch_size=2, progress=False))
    total = _count_lines(want)
    assert total == 60

    out = tmp_path / "got.jsonl"
    cmd = [sys.executable, "-m", "destila", "generate", str(teacher), str(prompts), "-o", str(out), *flags, "--quiet"]
    kills = []
    for threshold in (6, 24):
        killed = run_and_kill(cmd, lambda: _count_lines(out) >= threshold)
        assert killed, "the run finished before it could be killed"
        kills.append(_count_lines(out))
    assert kills[0] < kills[1] < total, kills  # each kill interrupted the run part-way
    finished = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert finished.returncode == 0, finished.stderr
    assert "resumed" in finished.stdout
    assert out.read_bytes() == want.read_bytes()


def test_documented_commands(chat_teacher, tmp_path, monkeypatch):
    """docs/techniques.md: generate from a conversation file, then cache the answers' text."""
    from destila.cache import read_manifest
    from destila.cli.main import main

    monkeypatch.chdir(tmp_path)
    rows = [{"messages": [{"role": "user", "content": line}]} for line in prompt_lines(6)]
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    commands = [
        f"destila generate {chat_teacher} prompts.jsonl -o answers.jsonl --max-new-tokens 128 "
        "--temperature 0.7 --top-p 0.9 --num-return-sequences 2 --seed 0",
        f"destila cache build {chat_teacher} answers.jsonl --messages-field messages --seq-len 256 -o cache-generated",
        f"destila cache build {chat_teacher} answers.jsonl --text-field text --seq-len 256 -o cache-generated-text",
    ]
    for command in commands:
        with pytest.raises(SystemExit) as done:
            main(command.split()[1:])
        assert done.value.code == 0, command
    assert len((tmp_path / "answers.jsonl").read_text().splitlines()) == 12
    assert read_manifest(tmp_path / "cache-generated").complete
    assert read_manifest(tmp_path / "cache-generated-text").complete
    # The conversation cache trains the answers only: fewer trained positions than the plain-text one.
    from destila.cache import TopKCache

    def trained(folder):
        cache = TopKCache(tmp_path / folder)
        return sum(int((cache[i]["labels"] != -100).sum()) for i in range(len(cache)))

    assert 0 < trained("cache-generated") < trained("cache-generated-text")
