"""``transformers.TrainingArguments``' fields read from the installed source, without importing transformers.

``from transformers import TrainingArguments`` imports torch and takes
seconds; ``destila train --help`` and the answer to a mistyped value should
not. The fields are declared in one file, ``transformers/training_args.py``,
as plain ``name: TYPE = field(default=..., metadata={"help": ...})`` lines:
this module finds that file (``importlib.util.find_spec``, which locates a
package without importing it), parses it with :mod:`ast` and evaluates each
field's annotation and ``field(...)`` call, giving a dataclass with the same
fields, types, defaults and help. The names those lines use are resolved from
the source too: the ``str`` enums (``SchedulerType``, ``IntervalStrategy``,
...) from their ``NAME = "value"`` members, module constants from their
literal values, anything else as a stand-in class that accepts any text
(``ParallelismConfig``: checked when transformers itself parses it).

The same ``HfArgumentParser`` rules then apply: its module
(``transformers/hf_argparser.py``) imports only the standard library and
PyYAML, and is loaded from the installed file on its own
(:func:`hf_argparser`). A test compares the parser built from these with the
one transformers builds, for the installed version.

Naive equivalent::

    from transformers import HfArgumentParser, TrainingArguments  # 4–7 s: torch
"""

from __future__ import annotations

import ast
import builtins
import dataclasses
import enum
import functools
import importlib
import importlib.util
import sys
import typing
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path


_BUILTINS = frozenset(dir(builtins))


class SourceUnreadable(Exception):
    """The installed transformers' source is not where, or not what, this reader expects."""


@functools.lru_cache(maxsize=None)
def package_dir() -> Path:
    """The installed transformers package's folder (found, not imported)."""
    spec = importlib.util.find_spec("transformers")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise SourceUnreadable("transformers is not installed as a package folder")
    return Path(locations[0])


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError) as err:
        raise SourceUnreadable(f"{path}: {err}") from None


def _module_file(package: Path, dotted: str) -> Path | None:
    """``transformers/<dotted>.py`` or ``<dotted>/__init__.py``, for a relative import's module."""
    base = package.joinpath(*dotted.split(".")) if dotted else package
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


# transformers' own checks of the installed torch, which some defaults depend on (``optim``: the fused AdamW from
# torch 2.8): answered from the installed torch's metadata, without importing it.
_TORCH_GATES = ("is_torch_available",)
_TORCH_AT_LEAST = "is_torch_greater_or_equal_than_"


def _torch_gate(name: str):
    try:
        installed = tuple(int(part) for part in version("torch").split("+")[0].split(".")[:2])
    except (PackageNotFoundError, ValueError):
        installed = None
    if name == "is_torch_available":
        return lambda: installed is not None
    wanted = tuple(int(part) for part in name.removeprefix(_TORCH_AT_LEAST).split("_")[:2])
    return installed is not None and installed >= wanted


def _stand_in(name: str) -> type:
    """A class the source names but this reader cannot build: any text is accepted as it (transformers checks it)."""
    return type(name, (str,), {"__module__": __name__})


class _SourceNames(dict):
    """The names a transformers source file uses, resolved from the source on first use (a ``locals`` mapping
    for :func:`eval`): what it imports from its package, its literal constants, its enums."""

    def __init__(self, path: Path, depth: int = 0):
        super().__init__()
        self.path, self.depth, self.imports, self.stdlib = path, depth, {}, set()
        package = package_dir()
        here = ".".join(path.relative_to(package).with_suffix("").parts[:-1])
        for node in _tree(path).body:
            if isinstance(node, ast.ImportFrom) and node.level:
                parts = here.split(".") if here else []
                parts = parts[:len(parts) - (node.level - 1)] if node.level > 1 else parts
                module = ".".join([*parts, *([node.module] if node.module else [])])
                for alias in node.names:
                    self.imports[alias.asname or alias.name] = (module, alias.name)
            elif isinstance(node, ast.Import):  # the standard library's modules are light: imported as they are
                for alias in node.names:
                    if alias.name.partition(".")[0] in sys.stdlib_module_names and alias.asname is None:
                        self.stdlib.add(alias.name.partition(".")[0])

    def __missing__(self, name: str):
        value = self._resolve(name)
        self[name] = value
        return value

    def _resolve(self, name: str):
        if name in _BUILTINS:
            raise KeyError(name)  # eval looks in the builtins next
        if name in ("Any", "Literal", "Union", "Optional", "ClassVar"):
            return getattr(typing, name)
        if name in self.stdlib:
            return importlib.import_module(name)
        if name in _TORCH_GATES or name.startswith(_TORCH_AT_LEAST):
            return _torch_gate(name)
        tree = _tree(self.path)
        for node in tree.body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return _class(node)
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return _getter(node, self)
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id == name):
                try:
                    return _evaluate(node.value, self)
                except Exception:  # a run-time value (a logger, a version check): not a declaration's
                    return _stand_in(name)
        if name in self.imports and self.depth < 4:
            module, original = self.imports[name]
            submodule = _module_file(package_dir(), f"{module}.{original}" if module else original)
            if submodule is not None:  # `from .utils import logging`: a module
                return _SourceModule(_SourceNames(submodule, self.depth + 1))
            found = _module_file(package_dir(), module)
            if found is not None:  # `from .trainer_utils import SchedulerType`: a name in a module
                return _SourceNames(found, self.depth + 1)[original]
        return _stand_in(name)


class _SourceModule:
    """A module named in an import (``from .utils import logging``): attribute access resolves its names."""

    def __init__(self, names: _SourceNames):
        self._names = names

    def __getattr__(self, name: str):
        return self._names[name]


def _getter(node: ast.FunctionDef, names: _SourceNames):
    """A function whose body is ``return EXPRESSION`` (``get_log_levels_dict``), else a stand-in."""
    body = [s for s in node.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    if len(body) == 1 and isinstance(body[0], ast.Return) and body[0].value is not None and not node.args.args:
        return lambda: _evaluate(body[0].value, names)
    return _stand_in(node.name)


def _class(node: ast.ClassDef) -> type:
    """An enum of ``str`` values (``class SchedulerType(ExplicitEnum): LINEAR = "linear"``), else a stand-in."""
    bases = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    if not any(base.endswith("Enum") for base in bases):
        return _stand_in(node.name)
    members = [(s.targets[0].id, s.value.value) for s in node.body
               if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Name)
               and isinstance(s.value, ast.Constant)]
    return enum.Enum(node.name, members, type=str if all(isinstance(v, str) for _, v in members) else None,
                     module=__name__)


def _evaluate(node: ast.expr, names: _SourceNames):
    """The value of a declaration's expression (a literal, an enum member, ``dict(**levels, passive=-1)``)."""
    return eval(compile(ast.Expression(node), str(names.path), "eval"), {"__builtins__": builtins}, names)


@functools.lru_cache(maxsize=None)
def training_arguments_fields() -> tuple[list[tuple[str, object, dataclasses.Field]], tuple[str, ...]]:
    """``([(name, type, field), ...], dict_fields)``: ``TrainingArguments``' fields in declaration order, their
    annotations evaluated (as ``typing.get_type_hints`` gives them) and their ``field(...)`` calls made;
    ``dict_fields`` its ``_VALID_DICT_FIELDS`` (fields that take a JSON object as text)."""
    try:
        return _read_fields()
    except SourceUnreadable:
        raise
    except Exception as err:  # a layout this reader does not know (a file moved, a path outside the package)
        raise SourceUnreadable(f"TrainingArguments' source: {type(err).__name__}: {err}") from None


def _read_fields():
    path = package_dir() / "training_args.py"
    names = _training_args_names()
    names["field"] = dataclasses.field
    classes = [n for n in _tree(path).body if isinstance(n, ast.ClassDef) and n.name == "TrainingArguments"]
    if not classes:
        raise SourceUnreadable(f"{path}: no class TrainingArguments")
    fields, dict_fields = [], ()
    for node in _class_statements(classes[0].body, names):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "_VALID_DICT_FIELDS"):
            dict_fields = tuple(ast.literal_eval(node.value))
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        if "ClassVar" in ast.unparse(node.annotation):
            continue
        try:
            hint = _evaluate(node.annotation, names)
            value = _evaluate(node.value, names) if node.value is not None else dataclasses.MISSING
        except Exception as err:
            raise SourceUnreadable(f"{path}, line {node.lineno}: {type(err).__name__}: {err}") from None
        if not isinstance(value, dataclasses.Field):
            value = dataclasses.field(default=value)
        fields.append((node.target.id, hint, value))
    return fields, dict_fields


def _class_statements(body: list[ast.stmt], names: _SourceNames):
    """The class body's statements in order, its plain assignments made (``default_optim = "adamw_torch"``) and
    its ``if`` blocks taken or not as they would be (``if is_torch_available(): ...``)."""
    for node in body:
        if isinstance(node, ast.If):
            try:
                taken = bool(_evaluate(node.test, names))
            except Exception as err:
                raise SourceUnreadable(f"{names.path}, line {node.lineno}: {type(err).__name__}: {err}") from None
            yield from _class_statements(node.body if taken else node.orelse, names)
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and not node.targets[0].id.startswith("_")):
            try:
                names[node.targets[0].id] = _evaluate(node.value, names)
            except Exception as err:
                raise SourceUnreadable(f"{names.path}, line {node.lineno}: {type(err).__name__}: {err}") from None
        else:
            yield node


@functools.lru_cache(maxsize=None)
def hf_argparser():
    """transformers' ``hf_argparser`` module, loaded from the installed file on its own (it imports only the
    standard library and PyYAML; a version whose module needs more raises :class:`SourceUnreadable`)."""
    path = package_dir() / "hf_argparser.py"
    spec = importlib.util.spec_from_file_location("destila_hf_argparser", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # a relative import (the module needs its package, the heavy part), a missing file
        raise SourceUnreadable(f"{path}: {type(err).__name__}: {err}") from None
    return module


def training_argument_names() -> list[str]:
    """The names of ``TrainingArguments``' fields that its ``__init__`` takes, read from the source when it can
    be read, else from the class itself."""
    try:
        return [name for name, _, f in training_arguments_fields()[0] if f.init]
    except SourceUnreadable:
        from transformers import TrainingArguments  # heavy: transformers

        return [f.name for f in dataclasses.fields(TrainingArguments) if f.init]


def dict_field_names() -> tuple[str, ...]:
    """``TrainingArguments``' fields that read text starting with ``{`` as a JSON object (``lr_scheduler_kwargs``)."""
    try:
        return training_arguments_fields()[1]
    except SourceUnreadable:
        from transformers import TrainingArguments  # heavy: transformers

        return tuple(getattr(TrainingArguments, "_VALID_DICT_FIELDS", ()))


def annotation(text: str):
    """A type annotation written with ``TrainingArguments``' names (``SchedulerType | str``), evaluated as
    ``typing.get_type_hints`` would in a module that imports them."""
    names = _training_args_names()
    try:
        return _evaluate(ast.parse(text, mode="eval").body, names)
    except Exception as err:
        raise SourceUnreadable(f"annotation {text!r}: {type(err).__name__}: {err}") from None


@functools.lru_cache(maxsize=None)
def _training_args_names() -> _SourceNames:
    return _SourceNames(package_dir() / "training_args.py")
