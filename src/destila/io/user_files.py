"""Reading the user's files: a damaged or malformed one becomes one ``ValueError`` that names it.

Libraries report a truncated or malformed file in their own words and
without its name: ``SafetensorError: invalid header length``,
``struct.error`` or ``cannot reshape array`` from a truncated GGUF,
``JSONDecodeError`` from a cut ``tokenizer.json``, ``DatasetGenerationError``
from one bad line of a jsonl. :func:`reading` wraps the code that reads a
user's file or folder; when such an error escapes it, the folder is searched
for the file that is damaged (every ``.json`` parsed, every
``.safetensors`` header checked against the file's size) and the error is
raised again as one line::

    model: /data/teacher/model.safetensors is damaged (its header says 193456 bytes of tensors, the file
    holds 2992); expected an intact save_pretrained file; copy or save it again

Naive equivalent: ``try: load(path) except Exception as e: raise ValueError(f"{path}: {e}")``,
which would also swallow destila's own errors and bugs; only the error types
that mean "this file is damaged" are translated.
"""

from __future__ import annotations

import contextlib
import json
import struct
from pathlib import Path

# Messages by which numpy / gguf / tokenizers say the bytes they read are not what the format promised.
_DAMAGE_TEXT = ("cannot reshape array", "invalid header", "EOF while parsing", "expected value at line",
                "unexpected end", "buffer of at least", "incomplete metadata", "HeaderTooLarge", "HeaderTooSmall",
                "MetadataIncompleteBuffer", "InvalidHeader", "not a valid JSON file", "GGUF magic")


def is_damage(err: BaseException) -> bool:
    """True when ``err`` is a library's way of saying the bytes of a file are damaged or malformed."""
    if isinstance(err, (json.JSONDecodeError, UnicodeDecodeError, struct.error, EOFError)):
        return True
    name = type(err).__name__
    if name in ("SafetensorError", "DatasetGenerationError", "ArrowInvalid"):
        return True
    if isinstance(err, OSError) and getattr(err, "errno", None):
        return False  # the machine's fault, named by the caller's OS-error line
    return any(text in str(err) for text in _DAMAGE_TEXT)


@contextlib.contextmanager
def reading(path, role: str, remedy: str = "replace it with an intact copy (or save it again)"):
    """Run the body that reads the user's ``path``; a damage error becomes ``ValueError`` naming the file.

    ``role`` starts the message ("model", "tokenizer", "data"); ``remedy`` ends it.
    """
    try:
        yield
    except Exception as err:
        if not is_damage(err):
            raise
        raise ValueError(damage_message(path, err, role, remedy)) from err


def damage_message(path, err: BaseException, role: str, remedy: str) -> str:
    """``<role>: <file> is damaged (<why>); <remedy>``, the file found inside ``path`` where it is a folder."""
    found = find_damaged(Path(path))
    file, why = found if found else (Path(path), _first_line(err))
    return f"{role}: {file} is damaged or truncated ({why}); {remedy}"


def find_damaged(path: Path) -> tuple[Path, str] | None:
    """The first damaged file at ``path`` (a file, or a folder searched in name order) and what is wrong."""
    files = [path] if path.is_file() else sorted(p for p in path.glob("*") if p.is_file()) if path.is_dir() else []
    for file in files:
        why = _check(file)
        if why:
            return file, why
    return None


def _check(file: Path) -> str | None:
    suffix = file.suffix.lower()
    try:
        if suffix == ".json":
            json.loads(file.read_text(encoding="utf-8"))
        elif suffix == ".jsonl":
            return first_bad_json_line(file)
        elif suffix == ".safetensors":
            return _safetensors_fault(file)
        elif suffix == ".gguf":
            return _gguf_fault(file)
    except (ValueError, UnicodeDecodeError) as err:
        return _first_line(err)
    return None


def first_bad_json_line(file: Path) -> str | None:
    """``line N: <why>`` for the first non-empty line of ``file`` that is not one JSON object, or None."""
    with open(file, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw.decode("utf-8").strip())
            except UnicodeDecodeError:
                return f"line {number}: not UTF-8 text"
            except json.JSONDecodeError as err:
                return f"line {number}: not valid JSON ({err.msg}, column {err.colno})"
            if not isinstance(row, dict):
                return f"line {number}: expected a JSON object, found {type(row).__name__}"
    return None


def _safetensors_fault(file: Path) -> str | None:
    """What is wrong with the safetensors layout (8-byte header length, JSON header, tensor bytes), or None."""
    size = file.stat().st_size
    with open(file, "rb") as handle:
        head = handle.read(8)
        if len(head) < 8:
            return f"{size} bytes, shorter than the 8-byte header length"
        length = struct.unpack("<Q", head)[0]
        if length > size - 8:
            return f"its header length says {length} bytes, the file holds {size - 8} after it"
        try:
            header = json.loads(handle.read(length))
        except (ValueError, UnicodeDecodeError):
            return "its header is not valid JSON"
    ends = [entry["data_offsets"][1] for key, entry in header.items()
            if key != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry]
    needed = 8 + length + max(ends, default=0)
    if needed > size:
        return f"its header promises {needed} bytes, the file holds {size}"
    return None


def _gguf_fault(file: Path) -> str | None:
    """A GGUF file that its own reader cannot parse: its error, or None."""
    try:
        from gguf import GGUFReader  # optional: installed with the GGUF support of transformers
    except ImportError:
        return None
    try:
        GGUFReader(str(file))
    except Exception as err:  # the reader raises struct/numpy/value errors on cut files
        return _first_line(err) or type(err).__name__
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def config_values(path: Path):
    """The parsed content of a ``.json`` or YAML options file; a file that does not parse is one line naming it.

    YAML is read with the safe loader: a ``!!python/...`` tag is refused (never run), like a tab used for
    indentation or a file cut mid-key, with the line and column where the parser stopped.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ValueError(f"--config {path}: not UTF-8 text; expected a YAML or JSON file of options") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            raise ValueError(f"--config {path}, line {err.lineno}, column {err.colno}: not valid JSON ({err.msg}); "
                             "fix the file") from None
    # pyyaml: only when a YAML options file is read
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"--config {path}{yaml_fault(err)}; expected plain option: value lines, indented with "
                         "spaces") from None


def config_key_lines(path: Path) -> dict[str, int]:
    """``{key: line}`` (from 1) of the top-level keys of a YAML or JSON options file, from YAML's node marks (JSON
    is read the same way); ``{}`` for a file that is not a mapping or does not compose."""
    # pyyaml: only when an options file is read
    import yaml

    try:
        node = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {str(key.value): key.start_mark.line + 1 for key, _ in node.value if isinstance(key, yaml.ScalarNode)}


def yaml_fault(err) -> str:
    """``, line L, column C: not valid YAML (<problem>)`` for a PyYAML error: where its parser stopped, and why."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or _first_line(err)
    if "could not determine a constructor" in str(err):
        problem = f"{problem} (Python tags are never run: the file is read with YAML's safe loader)"
    return f"{where}: not valid YAML ({problem})"
