"""Best-fit decreasing packing (whole documents, never split) and the count of trained positions left out."""

import json

import numpy as np
import pytest
import torch

from destila.cli.main import main
from destila.data import DataSpec, packed_source
from destila.data.bfd import plan_bfd


def naive_bfd_rooms(lengths, L) -> list[int]:
    """The docstring's loop: the free room of every row, sorted."""
    rooms = []
    for size in sorted((min(n, L) for n in lengths if n), reverse=True):
        fits = [i for i, room in enumerate(rooms) if room >= size]
        if fits:
            best = min(fits, key=lambda i: rooms[i])
            rooms[best] -= size
        else:
            rooms.append(L - size)
    return sorted(rooms)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_plan_equals_the_naive_best_fit(seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 90, size=300)
    offsets, documents = plan_bfd(lengths, 64)
    sizes = np.minimum(lengths, 64)
    rooms = sorted(64 - int(sizes[documents[a:b]].sum()) for a, b in zip(offsets[:-1], offsets[1:]))
    assert rooms == naive_bfd_rooms(lengths.tolist(), 64)
    assert sorted(documents.tolist()) == np.flatnonzero(lengths).tolist()  # each document once, never split


CHATS = [{"messages": [{"role": "user", "content": "Tell me about topic %d, briefly." % i},
                       {"role": "assistant", "content": "Topic %d is " % i + "interesting; " * (i % 7 + 1)}]}
         for i in range(30)]


@pytest.fixture
def chat_file(tmp_path):
    path = tmp_path / "chat.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in CHATS))
    return path


def trained_in_rows(source) -> int:
    return sum(int(source[i]["loss_mask"].sum()) for i in range(len(source)))


def trainable(source) -> int:
    targets = np.asarray(source.store.targets).astype(bool)
    targets[np.asarray(source.store.offsets)[:-1]] = False
    return int(targets.sum())


def test_conversations_default_to_bfd_and_stay_whole(chat_file, tiny_chat_tokenizer):
    source = packed_source(DataSpec(str(chat_file), messages_field="messages", seq_len=48), tiny_chat_tokenizer)
    assert source.spec.packing == "bfd"
    store = source.store
    starts = set()
    for i in range(len(source)):
        item = source[i]
        starts |= {tuple(item["input_ids"][t:t + 4].tolist()) for t in (item["position_ids"] == 0).nonzero().flatten()}
    for d in range(store.documents):  # every conversation starts a block in some row: its system and user turns
        begin, end = int(store.offsets[d]), int(store.offsets[d + 1])
        if end - begin >= 4:
            assert tuple(store.tokens[begin:begin + 4].tolist()) in starts
    assert trained_in_rows(source) + sum(source.dropped_positions().values()) == trainable(source)


@pytest.mark.parametrize("packing", ["documents", "bfd", "none"])
def test_dropped_positions_account_for_every_trained_position(chat_file, tiny_chat_tokenizer, packing):
    source = packed_source(DataSpec(str(chat_file), messages_field="messages", seq_len=40, packing=packing),
                           tiny_chat_tokenizer)
    dropped = source.dropped_positions()
    assert trained_in_rows(source) + sum(dropped.values()) == trainable(source)
    if packing == "documents":
        assert dropped.get("row_seams", 0) > 0  # conversations cut by rows lose the first token of their rest
    else:
        assert "row_seams" not in dropped


def test_the_build_reports_what_it_dropped(chat_file, tiny_chat_llama_dir, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "build", str(tiny_chat_llama_dir), str(chat_file), "-o", str(tmp_path / "c"),
              "--messages-field", "messages", "--seq-len", "24", "--top-k", "4", "--quiet"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert "trained or not" in out  # tokens/s counts every token and says so
    line = next(line for line in out.splitlines() if line.startswith("dropped"))
    assert "beyond --seq-len" in line  # conversations longer than 24 tokens are truncated, and counted
