"""destila.io: atomic writes, staged folders, the writer's lock and the one-line OS-error text."""

from __future__ import annotations

import errno
import subprocess
import sys
import textwrap

import pytest

from destila.io import (
    as_os_error,
    describe_os_error,
    exclusive_lock,
    is_temporary,
    names_user_path,
    publish_folder,
    write_atomic,
)


def test_write_atomic_replaces_whole_files_and_leaves_nothing_behind(tmp_path):
    path = tmp_path / "state.json"
    write_atomic(path, "old")
    write_atomic(path, b"new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.json"
    write_atomic(path, "old")
    with pytest.raises(TypeError):
        write_atomic(path, 12345)  # not bytes: the write itself fails, after the temporary file was opened
    assert path.read_text() == "old"
    assert not any(is_temporary(p.name) for p in tmp_path.iterdir())


def test_publish_folder_moves_a_finished_folder_into_place(tmp_path):
    staging = tmp_path / ".out.tmp-1"
    (staging / "sub").mkdir(parents=True)
    (staging / "sub" / "a.bin").write_bytes(b"abc")
    publish_folder(staging, tmp_path / "out")
    assert (tmp_path / "out" / "sub" / "a.bin").read_bytes() == b"abc" and not staging.exists()
    other = tmp_path / ".out.tmp-2"
    (other / "x").mkdir(parents=True)
    with pytest.raises(OSError):  # a non-empty target is never replaced: the caller decides
        publish_folder(other, tmp_path / "out")
    assert (other / "x").is_dir()


def test_a_second_process_is_refused_the_lock_until_the_first_exits(tmp_path):
    lock = tmp_path / ".lock"
    holder = exclusive_lock(lock, "busy")
    probe = textwrap.dedent(f"""
        from destila.io import exclusive_lock
        try:
            exclusive_lock({str(lock)!r}, "busy: another writer")
        except ValueError as err:
            print(err)
    """)
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "busy: another writer"
    holder.close()
    found = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == ""


def test_os_errors_become_one_line_naming_the_file():
    full = OSError(errno.ENOSPC, "No space left on device", "/data/cache/shard-1")
    assert describe_os_error(full) == ("no space left on device at /data/cache/shard-1; free space there and run "
                                       "the same command again")
    rust = Exception("failed to write tokenizer.json (os error 28)")  # a Rust writer names no file
    named = as_os_error(rust, "/data/cache/tokenizer")
    assert named.errno == errno.ENOSPC and named.filename == "/data/cache/tokenizer"
    assert as_os_error(ValueError("not a disk problem"), "/x") is None
    ours = OSError(errno.ENOSPC, "could not write the cache folder; every shard recorded is intact")
    assert describe_os_error(ours) == ours.strerror  # destila's own sentence is kept


def _raised_by(body, path, *message):
    """The error ``names_user_path(path, *message)`` lets out of ``body``."""
    with pytest.raises(Exception) as caught:
        with names_user_path(path, *message):
            body()
    return caught.value


def _raise(err):
    def body():
        raise err
    return body


def test_names_user_path_names_the_users_path_never_a_temporary_or_lock(tmp_path):
    out = tmp_path / "answers.jsonl"
    for internal in (tmp_path / ".answers.jsonl.lock", tmp_path / ".answers.jsonl.generate.json.tmp-41",
                     None):  # a lock beside the output, a sidecar's temporary, a write that names no file
        err = _raised_by(_raise(OSError(errno.EROFS, "Read-only file system", internal)), out)
        assert type(err) is OSError and err.errno == errno.EROFS and err.filename is None
        assert str(err) == (f"[Errno 30] read-only file system at {out}; choose an output folder on a writable "
                            "file system")
    cache = tmp_path / "cache"  # a staging folder inside the output, and a folder above it that had to be made
    for internal in (cache / ".tokenizer.tmp-7" / "tokenizer.json", tmp_path):
        err = _raised_by(_raise(OSError(errno.ENOSPC, "No space left on device", internal)), cache)
        assert err.strerror == f"no space left on device at {cache}; free space there and run the same command again"
    kept = cache / "checkpoint-4" / "optimizer.pt"  # a real file inside the output: named as it is
    err = _raised_by(_raise(OSError(errno.ENOSPC, "No space left on device", str(kept))), cache)
    assert err.strerror.startswith(f"no space left on device at {kept};")


def test_names_user_path_finds_disguised_failures_and_leaves_other_errors_alone(tmp_path):
    home = tmp_path / "home"
    rust = _raised_by(_raise(Exception("failed to write model.safetensors (os error 28)")), home,
                      "{reason} at {root}; or set DESTILA_HOME to another folder")
    assert rust.errno == errno.ENOSPC
    assert rust.strerror == f"no space left on device at {home}; or set DESTILA_HOME to another folder"
    others = (ValueError("not a disk problem"), KeyError("bug"),
              OSError(errno.EACCES, "Permission denied", str(tmp_path / "prompts.txt")),  # the user's input
              OSError(errno.ENOSPC, f"could not write to the cache folder {home}: …"))  # an inner helper's line
    for original in others:
        assert _raised_by(_raise(original), home) is original
    with names_user_path(home):  # nothing raised: nothing changes
        pass


def test_a_link_planted_under_the_next_temporary_name_is_never_written_through(tmp_path, monkeypatch):
    """Even a guessed name (here: forced) only makes the writer draw another one; the victim stays, the file and the
    permissions are those of a plain write."""
    import os
    import secrets
    import stat

    from destila.io import create_staging_dir, open_lock_file
    from destila.io.permissions import current_umask

    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    drawn = iter(["a" * 16, "b" * 16, "c" * 16, "d" * 16])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(drawn))
    (tmp_path / f".state.json.tmp-{'a' * 16}").symlink_to(victim)
    write_atomic(tmp_path / "state.json", "new")
    assert victim.read_text() == "mine" and (tmp_path / "state.json").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "state.json").stat().st_mode) == 0o666 & ~current_umask()
    (tmp_path / f".out.tmp-{'c' * 16}").symlink_to(tmp_path)
    staging = create_staging_dir(tmp_path / "out")
    assert staging.name == f".out.tmp-{'d' * 16}" and staging.is_dir() and not staging.is_symlink()
    (tmp_path / ".lock").symlink_to(tmp_path / "made-by-the-lock")
    with pytest.raises(FileExistsError, match=r"\.lock is a symbolic link \(to .*made-by-the-lock\)") as raised:
        open_lock_file(tmp_path / ".lock")
    assert raised.value.errno == errno.EEXIST and not (tmp_path / "made-by-the-lock").exists()
    assert os.path.islink(tmp_path / ".lock")


# Direct writes that are not reports, each with its reason; everything else a module writes goes through io/.
_DIRECT_WRITES = {
    "eval/measure.py": "/proc/self/clear_refs, a kernel switch",
    "data/store.py": "files inside a staging folder that publish_folder renames whole",
    "student/init.py": "the incomplete-flag, whose presence alone is the message",
    "training/run.py": "the incomplete-flag, whose presence alone is the message",
    "bench/results.py": "the bench harness's own CSV writer",
}


def test_every_report_is_written_through_io():
    """``write_text``, ``write_bytes``, ``json.dump`` or ``open(..., "w")`` outside ``io/`` is a file a kill could
    leave half-written: only the listed, non-report writes may do it."""
    import ast
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent / "src" / "destila"
    writers = set()
    for path in src.rglob("*.py"):
        if "io" in path.relative_to(src).parts[:1]:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, (ast.Attribute, ast.Name)):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            mode = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            if name in ("write_text", "write_bytes", "dump") or (name == "open" and mode and "w" in str(mode[0])):
                writers.add(str(path.relative_to(src)))
    assert writers == set(_DIRECT_WRITES), writers ^ set(_DIRECT_WRITES)


def test_json_lines_round_trip_through_real_files(tmp_path):
    from destila.io.json_lines import (
        append_json_line,
        json_lines,
        read_json_lines,
        start_json_lines,
        write_json_lines,
    )

    records = [{"step": 1, "text": "café"}, {"step": 2, "nested": {"a": [1, 2]}}]
    assert json_lines(records) == '{"step": 1, "text": "caf\\u00e9"}\n{"step": 2, "nested": {"a": [1, 2]}}\n'
    assert json_lines(records[:1], ensure_ascii=False) == '{"step": 1, "text": "café"}\n'
    path = start_json_lines(tmp_path / "new" / "log.jsonl")  # the folder is made
    assert path.read_text() == ""
    for record in records:
        append_json_line(path, record)
    assert read_json_lines(path) == records
    assert path.read_text() == json_lines(records)
    start_json_lines(path)  # starting again empties it
    assert read_json_lines(path) == []
    write_json_lines(tmp_path / "other" / "rows.jsonl", records)
    assert (tmp_path / "other" / "rows.jsonl").read_text() == json_lines(records)


def test_a_line_cut_short_is_refused_unless_asked_to_skip_it(tmp_path):
    from destila.io.json_lines import json_lines, read_json_lines

    path = tmp_path / "log.jsonl"
    path.write_text(json_lines([{"step": 1}, {"step": 2}]) + "\n" + '{"step": 3, "lo')  # a blank line, a cut tail
    with pytest.raises(ValueError):
        read_json_lines(path)
    assert read_json_lines(path, skip_damaged=True) == [{"step": 1}, {"step": 2}]


def test_no_json_lines_writer_is_written_by_hand():
    """``json.dumps(...) + "\\n"`` outside ``io/json_lines.py`` is a second JSON-lines writer: use the helper."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    found = []
    for path in [*(root / "src" / "destila").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]:
        if path.name == "json_lines.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add)
                    and isinstance(node.right, ast.Constant) and node.right.value == "\n"
                    and isinstance(node.left, ast.Call) and isinstance(node.left.func, ast.Attribute)
                    and node.left.func.attr == "dumps"
                    and not any(k.arg == "indent" for k in node.left.keywords)):  # a JSON file, not JSON lines
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []


def test_markdown_table_lines_and_alignment(tmp_path):
    from destila.io.markdown import markdown_table, table_lines

    text = markdown_table(["name", "value", "note"], [("a", 1, "x"), ("b", 2.5, "")], "lrl")
    path = tmp_path / "table.md"
    path.write_text(text + "\n")
    assert path.read_text().splitlines() == ["| name | value | note |", "|---|---:|---|", "| a | 1 | x |",
                                             "| b | 2.5 |  |"]
    assert table_lines(["model", "acc", "seconds"], [])[1] == "|---|---:|---:|"  # default: the first column left
    assert table_lines(None, [("tokens", 3)], "lr")[:2] == ["| | |", "|---|---:|"]  # columns without names
    assert table_lines(["a", "b"], [], "lr", spaced_rule=True)[1] == "| --- | ---: |"
    with pytest.raises(ValueError, match="align"):
        table_lines(["a", "b"], [], "l")


def test_no_markdown_table_is_written_by_hand():
    """A table's rule line (``|---|``) outside ``io/markdown.py`` is a second table writer: use the helper."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    found = [f"{path.relative_to(root)}:{number}"
             for path in [*(root / "src" / "destila").rglob("*.py"), *(root / "benchmarks").rglob("*.py")]
             if path.name != "markdown.py"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if "|---" in line or '" | ".join' in line]
    assert found == []


def test_progress_bar_draws_on_stderr_only_when_shown(capsys):
    from destila.io.progress import progress_bar

    with progress_bar(4, desc="measuring", unit="pass", initial=1) as bar:
        bar.update(3)
    drawn = capsys.readouterr()
    assert drawn.out == "" and "measuring" in drawn.err and "4/4" in drawn.err and "pass" in drawn.err
    with progress_bar(4, desc="hidden", show=False) as bar:
        bar.update(4)
    assert capsys.readouterr().err == ""


def test_staging_leftovers_are_removed_and_a_planted_link_is_never_followed(tmp_path):
    from destila.io import create_staging_dir, remove_staging_leftovers

    out = tmp_path / "export"
    killed = create_staging_dir(out)
    (killed / "data").mkdir()
    (killed / "data" / "part.parquet").write_bytes(b"half")
    (tmp_path / f".export{'.tmp-'}file").write_text("a temporary file")
    victim = tmp_path / "victim"
    (victim / "keep").mkdir(parents=True)
    (tmp_path / ".export.tmp-link").symlink_to(victim, target_is_directory=True)
    others = [tmp_path / ".exported.tmp-1", tmp_path / "export.tmp-2", tmp_path / ".other.tmp-3"]
    for other in others:  # another output's staging folders, and a name without the leading dot
        other.mkdir()
    remove_staging_leftovers(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".exported.tmp-1", "export.tmp-2", ".other.tmp-3",
                                                                 "victim"])
    assert (victim / "keep").is_dir()
