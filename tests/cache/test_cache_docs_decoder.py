"""The reference decoder printed in docs/cache.md, run as written against real caches (numpy + zstandard only)."""

import re
from pathlib import Path

import numpy as np
import pytest
import torch

from destila.cache import TopKCache, build_cache, read_manifest

DOC = Path(__file__).resolve().parents[2] / "docs" / "cache.md"
SMALL = dict(seq_len=32, max_tokens=32 * 6, top_k=9, shard_size=4, batch_size=3, progress=False)


def doc_code_blocks() -> list[str]:
    """The python blocks of the 'Reference decoder' section, in order."""
    text = DOC.read_text()
    section = text[text.index("### Reference decoder"):]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_decoder_is_about_thirty_lines():
    decoder = doc_code_blocks()[0]
    assert "import torch" not in decoder and "safetensors" not in decoder
    assert len(decoder.strip().splitlines()) <= 40


@pytest.fixture(scope="module")
def reference_decoder():
    namespace: dict = {}
    exec(compile(doc_code_blocks()[0], str(DOC), "exec"), namespace)
    return namespace


def test_reference_decoder_reads_a_compact_cache(reference_decoder, tiny_llama_dir, tmp_path):
    folder = tmp_path / "c"
    build_cache(str(tiny_llama_dir), "pydoc", folder, encoding="compact", **SMALL)
    cache = TopKCache(folder)
    manifest = read_manifest(folder)
    usage = doc_code_blocks()[1].replace('"cache/', f'"{folder}/')
    checked = 0
    for number, shard in enumerate(manifest.shards):
        for r in range(shard.rows):
            namespace = {**reference_decoder, "r": r}
            exec(usage.replace('m["shards"][0]', f'm["shards"][{number}]'), namespace)
            input_ids, position_ids, mask, ids, logprobs, tail = namespace["row"]
            item = cache[int(shard.indices()[r])]
            trained = item["labels"] != -100
            assert np.array_equal(input_ids, item["input_ids"].numpy())
            assert np.array_equal(position_ids, item["position_ids"].numpy())
            assert np.array_equal(mask, trained.numpy())
            assert np.array_equal(tail, item["tail_logmass"][trained].numpy())
            # the reader sorts by log-prob; sort both by id to compare
            order = item["topk_ids"][trained].argsort(1)
            assert np.array_equal(ids, item["topk_ids"][trained].gather(1, order).numpy())
            torch.testing.assert_close(torch.from_numpy(logprobs),
                                       item["topk_logprobs"][trained].double().gather(1, order), rtol=0, atol=1e-5)
            checked += 1
    assert checked == len(cache)


def test_reference_shard_reader_reads_bfloat16_without_torch(reference_decoder, tiny_llama_dir, tmp_path):
    folder = tmp_path / "bf16"
    build_cache(str(tiny_llama_dir), "pydoc", folder, logprob_dtype="bfloat16", **SMALL)
    from safetensors.torch import load_file

    shard = read_manifest(folder).shards[0]
    via_numpy = reference_decoder["read_shard"](folder / shard.name)
    via_torch = load_file(str(folder / shard.name))
    assert set(via_numpy) == set(via_torch)
    for name, tensor in via_torch.items():
        want = tensor.float().numpy() if tensor.dtype == torch.bfloat16 else tensor.numpy()
        assert np.array_equal(via_numpy[name], want, equal_nan=True), name
    assert via_numpy["topk_logprobs"].dtype == np.float32
