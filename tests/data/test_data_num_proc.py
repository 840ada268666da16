"""--num-proc N: N processes of datasets' map tokenise the corpus, and the cache is the one of a single process."""

import json

import pytest

from destila.cache import build_cache, read_manifest
from destila.cli.main import main as cli
from destila.data import DataSpec, pydoc_texts


def test_num_proc_2_tokenises_in_two_processes_and_builds_the_same_cache(tiny_llama_dir, tmp_path, monkeypatch):
    import datasets

    data = tmp_path / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": t[:400]}) + "\n" for t in pydoc_texts()[:40]))
    monkeypatch.setenv("DESTILA_DATA_CACHE", str(tmp_path / "stores-one"))
    build_cache(str(tiny_llama_dir), DataSpec(str(data), seq_len=32), tmp_path / "one", top_k=8, seq_len=32,
                shard_size=16, progress=False)
    # its own token store (num_proc does not change the store's key) and datasets cache
    monkeypatch.setenv("DESTILA_DATA_CACHE", str(tmp_path / "stores-two"))
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-two")
    with pytest.raises(SystemExit) as exit_:
        cli(["cache", "build", str(tiny_llama_dir), str(data), "-o", str(tmp_path / "two"), "--seq-len", "32",
             "--top-k", "8", "--shard-size", "16", "--num-proc", "2", "--quiet"])
    assert exit_.value.code == 0
    # datasets' map leaves one Arrow file per process: the flag reached it
    assert len(list((tmp_path / "hf-two").rglob("cache-*_0000[01]_of_00002.arrow"))) == 2
    manifest = read_manifest(tmp_path / "one")
    assert manifest.complete and len(manifest.shards) >= 2
    for name in ["manifest.json", *(s.name for s in manifest.shards)]:
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "two" / name).read_bytes(), name


def test_num_proc_is_refused_where_it_cannot_be_honoured(tiny_llama_dir, tmp_path, capsys):
    with pytest.raises(ValueError, match="expected at least 1 process, found 0; pass --num-proc 1 or more"):
        DataSpec("x.jsonl", num_proc=0)
    with pytest.raises(ValueError, match="a stream is tokenised as it is read, by one process; drop --num-proc or"):
        DataSpec("x.jsonl", num_proc=2, streaming=True)
    with pytest.raises(ValueError, match="until it is met, by one process; drop --num-proc or --max-tokens"):
        DataSpec("x.jsonl", num_proc=2, max_tokens=1024)
    assert "num_proc" not in DataSpec("x.jsonl", num_proc=4).describe()  # how, not what: no new store, same manifest
    for command in (["cache", "build", str(tiny_llama_dir), "pydoc", "-o", str(tmp_path / "c")],
                    ["train", str(tiny_llama_dir), "--teacher", str(tiny_llama_dir), "--data", "pydoc",
                     "-o", str(tmp_path / "t")]):
        with pytest.raises(SystemExit) as exit_:
            cli([*command, "--num-proc", "0"])
        assert exit_.value.code == 2 and not (tmp_path / "c").exists() and not (tmp_path / "t").exists()
        assert capsys.readouterr().err.strip() == (f"destila {command[0]}: error: num_proc: expected at least 1 "
                                                   "process, found 0; pass --num-proc 1 or more")
