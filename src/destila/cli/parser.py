"""The argument parser of every ``destila`` command: two promises argparse does not make.

1. Both spellings of a long flag work on every command: ``--eval-fraction``
   and ``--eval_fraction`` are the same flag, however it was declared.
2. An unknown flag is answered by the command that was given it, with that
   command's usage and the nearest flags it knows::

       destila train: error: unrecognized arguments: --learnig_rate 1e-3; did you mean --learning_rate?

   (Plain argparse reports a sub-command's unknown flag from the top-level
   parser, with the top-level usage and no suggestion.)

Sub-parsers are made of the same class (argparse's ``add_subparsers`` uses the
parent's class), so the root parser of ``destila`` brings both to every verb.
"""

from __future__ import annotations

import argparse
import difflib
import sys


class Parser(argparse.ArgumentParser):
    """``argparse.ArgumentParser`` with both spellings of every long flag and "did you mean" (see above)."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        namespace, extras = super().parse_known_args(self._respelled(args), namespace)
        # A command without sub-commands is the last to see its arguments: what it does not know is a
        # mistake, reported here with this command's usage rather than passed up to the top-level parser.
        if extras and not self._has_subcommands():
            self.error(unrecognized(extras, self._long_flags()))
        return namespace, extras

    def _long_flags(self) -> set[str]:
        # Read only: argparse keeps its option table in this attribute and offers no public view of it.
        return {name for name in self._option_string_actions if name.startswith("--")}

    def _has_subcommands(self) -> bool:
        return self._subparsers is not None

    def _respelled(self, args: list[str]) -> list[str]:
        """``args`` with each long flag this parser knows only in the other spelling (``-`` ↔ ``_``) respelled."""
        known = self._long_flags()
        out = []
        for i, arg in enumerate(args):
            if arg == "--":
                return out + args[i:]
            name, eq, value = arg.partition("=")
            if name.startswith("--") and name not in known:
                for other in ("--" + name[2:].replace("_", "-"), "--" + name[2:].replace("-", "_")):
                    if other in known:
                        name = other
                        break
            out.append(name + eq + value)
        return out


def unrecognized(extras: list[str], flags) -> str:
    """``unrecognized arguments: …``, and for each unknown flag the nearest known ones (in the user's spelling)."""
    message = "unrecognized arguments: " + " ".join(extras)
    unknown = [arg.partition("=")[0] for arg in extras if arg.startswith("--")]
    for name in unknown:
        near = difflib.get_close_matches(name, _in_style(flags, name), n=1, cutoff=0.6)
        where = f" (for {name})" if len(unknown) > 1 else ""
        if near:
            message += f"; did you mean {near[0]}{where}?"
        else:
            message += f"; {name} is not an option of this command (see --help)"
    return message


def _in_style(flags, name: str) -> list[str]:
    """One spelling per flag: the user's (``_`` or ``-``) where the flag has it."""
    style = "_" if "_" in name[2:] else "-"
    chosen: dict[str, str] = {}
    for flag in sorted(flags):
        key = flag[2:].replace("_", "-")
        if key not in chosen or style in flag[2:]:
            chosen[key] = flag
    return list(chosen.values())
