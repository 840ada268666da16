"""A 2-process torchrun cache build over a --streaming source writes the files of a 1-process build, byte for byte."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from destila.cache import TopKCache, read_manifest, verify_cache
from destila.data import pydoc_texts

FLAGS = ["--streaming", "--seq-len", "32", "--max-tokens", str(32 * 18), "--top-k", "12", "--shard-size", "4",
         "--batch-size", "1", "--quiet"]


def build(command, teacher, data, out, stores):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "DESTILA_DATA_CACHE": str(stores)}
    result = subprocess.run([*command, "-m", "destila", "cache", "build", str(teacher), str(data), "-o", str(out),
                             *FLAGS], env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_torchrun_streaming_build_equals_one_process(tiny_llama_dir, tmp_path):
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun not found next to the Python interpreter")
    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": t[:400]}) + "\n" for t in pydoc_texts()[:40]))
    build([sys.executable], tiny_llama_dir, data, tmp_path / "one", tmp_path / "stores-one")
    build([torchrun, "--standalone", "--nproc-per-node", "2"], tiny_llama_dir, data, tmp_path / "two",
          tmp_path / "stores-two")  # its own store: the two processes tokenise the stream themselves
    a, b = read_manifest(tmp_path / "one"), read_manifest(tmp_path / "two")
    assert b.complete and a.sequences == 18 and len(a.shards) == 5
    assert verify_cache(tmp_path / "two").ok
    # Ranks take whole shard-sized blocks of consecutive sequences, batched as one process batches them:
    # the same shard files, the same bytes, and so the same manifest (it records no world size or timing).
    files = sorted(p.name for p in (tmp_path / "one").glob("shard-*.safetensors"))
    assert files == sorted(p.name for p in (tmp_path / "two").glob("shard-*.safetensors")) == [s.name for s in a.shards]
    for name in [*files, "manifest.json"]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name
    cache = TopKCache(tmp_path / "two")
    assert any((cache[i]["labels"][:-1] == -100).any() for i in range(len(cache)))  # document bounds inside rows
