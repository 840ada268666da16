"""`destila cache export` of a cache built with --spans: the byte spans travel as columns, read back and verified."""

import json
import shutil

import pytest
import torch
from conftest import HARD_TEXTS, pydoc_texts

from destila.cache import TopKCache, build_cache
from destila.cache.dataset import open_cache
from destila.cache.export import ExportSpec, export_cache
from destila.cli.main import main

DOCS = HARD_TEXTS + pydoc_texts(2)


@pytest.fixture(scope="module")
def spans_export(tmp_path_factory, tiny_chat_llama_dir):
    root = tmp_path_factory.mktemp("spans-export")
    build_cache(str(tiny_chat_llama_dir), DOCS, root / "cache", spans=True, encoding="compact", seq_len=32, top_k=8,
                progress=False)
    export_cache(ExportSpec(str(root / "cache"), str(root / "export"), rows_per_file=8, progress=False))
    return root / "cache", root / "export"


def test_the_spans_read_back_from_the_export_as_from_the_cache(spans_export):
    import datasets

    cache_path, export_path = spans_export
    cache, exported = TopKCache(cache_path), open_cache(export_path)
    assert exported.manifest.spans and json.loads((export_path / "destila_cache.json").read_text())["spans"]
    for i in range(len(cache)):
        expected, found = cache[i], exported[i]
        assert found.keys() == expected.keys() and {"span_start", "span_end"} <= found.keys()
        for key in expected:
            assert torch.equal(found[key], expected[key]), key
    rows = datasets.load_dataset(str(export_path), split="train")
    assert rows[0]["span_start"] == cache[0]["span_start"].tolist()


def test_verify_covers_the_spans(spans_export, tmp_path, capsys):
    import pyarrow.parquet as pq

    from destila.cache.format import sha256_file

    _, export_path = spans_export
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "verify", str(export_path)])
    assert exit_.value.code == 0, capsys.readouterr().out
    edited = shutil.copytree(export_path, tmp_path / "edited")
    name = sorted(p.relative_to(edited).as_posix() for p in (edited / "data").iterdir())[0]
    rows = pq.read_table(edited / name).to_pylist()
    rows[0]["span_end"][0] += 1  # one byte span changed, the file's checksum updated
    pq.write_table(pq.read_table(edited / name).from_pylist(rows, schema=pq.read_schema(edited / name)), edited / name)
    record = json.loads((edited / "destila_cache.json").read_text())
    next(f for f in record["files"] if f["name"] == name).update(bytes=(edited / name).stat().st_size,
                                                                 sha256=sha256_file(edited / name))
    (edited / "destila_cache.json").write_text(json.dumps(record))
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["cache", "verify", str(edited)])
    assert exit_.value.code == 1 and "the rows were changed" in capsys.readouterr().out
