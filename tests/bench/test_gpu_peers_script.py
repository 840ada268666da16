"""benchmarks/gpu/peers.sh cannot run without a GPU: check its syntax and that every benchmark command in it parses."""

import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.peers.run import build_parser

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu" / "peers.sh"


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_script_is_valid_bash():
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_every_destila_command_in_the_script_parses():
    text = SCRIPT.read_text().replace("\\\n", " ")
    defaults = dict(re.findall(r"^(\w+)=\$\{\w+:-([^}]*)\}", text, flags=re.M))
    commands = [line.split("|")[0] for line in text.splitlines() if line.startswith('"${PEERS[@]}" ')]
    assert len(commands) == 2
    for command in commands:
        for name, value in defaults.items():
            command = command.replace(f'"${name}"', value).replace(f"${name}", value)
        command = re.sub(r'"\$\{WORKDIR:-([^}]*)\}"', r"\1", command)
        argv = shlex.split(command)[1:]
        args = build_parser().parse_args(argv)  # exits 2 on an unknown option
        assert args.device == "cuda" and args.dtype == "bfloat16" and args.peers
