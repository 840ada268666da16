"""The ``stdlib`` corpus: the standard library's modules, a fixed held-out split by package, a fixed order."""

import hashlib

import pytest

from destila.data import DataSpec, build_store, load_texts
from destila.data.stdlib import (EXCLUDED_FOLDERS, is_held_out, module_name, read_module, stdlib_files, stdlib_root,
                                 stdlib_texts)


def test_splits_are_disjoint_by_package_and_cover_every_module_read():
    train, test = stdlib_files("train"), stdlib_files("test")
    root = stdlib_root()
    everything = {module_name(path, root) for path in root.rglob("*.py")
                  if not EXCLUDED_FOLDERS.intersection(path.relative_to(root).parts[:-1])}
    train_names, test_names = {name for name, _ in train}, {name for name, _ in test}
    assert train_names | test_names == everything and not train_names & test_names
    assert {name.split(".")[0] for name in train_names}.isdisjoint({name.split(".")[0] for name in test_names})
    assert all(is_held_out(name) for name in test_names) and not any(is_held_out(name) for name in train_names)
    # The rule: the top-level name's SHA-256, first 8 hex digits, divisible by 10.
    assert is_held_out("email.mime.text") == (int(hashlib.sha256(b"email").hexdigest()[:8], 16) % 10 == 0)
    for name, path in train + test:
        assert not {"test", "tests", "idle_test", "pydoc_data", "encodings"} & set(path.relative_to(root).parts[:-1])
    assert 0.05 < len(test) / (len(train) + len(test)) < 0.4  # held out: a minority, not a sliver


def test_order_is_the_hash_of_the_module_name():
    names = [name for name, _ in stdlib_files("test")]
    assert names == sorted(names, key=lambda name: hashlib.sha256(name.encode()).hexdigest())
    assert stdlib_files("test") == stdlib_files("test")


def test_a_package_is_named_by_its_folder(tmp_path):
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    assert module_name(tmp_path / "pkg" / "__init__.py", tmp_path) == "pkg"
    assert module_name(tmp_path / "pkg" / "sub" / "mod.py", tmp_path) == "pkg.sub.mod"


def test_the_store_reads_the_split_in_order_and_stops_at_the_budget(tiny_tokenizer, tmp_path):
    store = build_store(DataSpec("stdlib", split="test", seq_len=64, max_tokens=64 * 8), tiny_tokenizer,
                        tmp_path / "store")
    first = next(text for text in stdlib_texts("test") if text.strip())
    expected = tiny_tokenizer(first, add_special_tokens=False)["input_ids"] + [tiny_tokenizer.eos_token_id]
    assert store.tokens[: min(len(expected), len(store.tokens))].tolist() == expected[: len(store.tokens)]
    assert len(store.tokens) >= 64 * 8 and store.documents < len(stdlib_files("test"))  # stopped early


def test_texts_and_refusals():
    texts = load_texts("stdlib")  # what student init's calibration reads
    assert texts == [text for text in (read_module(path) for _, path in stdlib_files("train")) if text.strip()]
    with pytest.raises(ValueError, match="stdlib has the splits train and test .* not 'validation'"):
        load_texts("stdlib", split="validation")
