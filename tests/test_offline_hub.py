"""A hub id without network fails within seconds, once, instead of through a minute of retries."""

import os
import subprocess
import sys
import time

import pytest


@pytest.mark.parametrize("endpoint", ["http://10.255.255.1", "http://127.0.0.1:9"])  # silent, and refusing
def test_hub_teacher_without_network_fails_within_5_seconds(tmp_path, endpoint):
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env.update(HF_ENDPOINT=endpoint, HF_HOME=str(tmp_path / "hf"), OMP_NUM_THREADS="1")
    # Time the loading alone: the interpreter and torch take their own seconds on a busy machine.
    code = ("import time, sys\nfrom destila import models\nfrom destila.models import placement\n"
            "from transformers import AutoConfig, AutoModelForCausalLM\nstart = time.monotonic()\n"
            "try:\n    models.load_causal_lm('nobody/no-such-model')\nexcept FileNotFoundError as err:\n"
            "    print(round(time.monotonic() - start, 2)); print(err); sys.exit(0)\nsys.exit(1)\n")
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, message = done.stdout.strip().split("\n", 1)
    assert float(seconds) < 5.0, (seconds, time.monotonic() - started)
    assert "nobody/no-such-model" in message and "could not provide it" in message and "\n" not in message


def test_an_unreachable_hub_switches_to_offline_once(monkeypatch):
    import huggingface_hub.constants

    from destila import models

    calls = []
    monkeypatch.setattr("destila.models.loading.hub_offline_reason", lambda: calls.append(1) or "no answer within 3 s")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    models.hub_unreachable.cache_clear()
    try:
        for _ in range(3):
            with pytest.raises(FileNotFoundError, match=r"offline: no answer within 3 s; it is not in the local cache"):
                models.load_tokenizer("nobody/no-such-model")
        assert calls == [1] and huggingface_hub.constants.HF_HUB_OFFLINE is True
    finally:
        models.hub_unreachable.cache_clear()


@pytest.mark.parametrize("given, expected", [(None, "NO"), ("YES", "YES")])
def test_the_command_line_runs_no_kernel_fetched_from_the_hub_unless_asked(monkeypatch, given, expected):
    """On CUDA transformers would swap the rotary embedding for a Hub kernel at the first step, which fails
    offline; the command line turns that off, and a user's own setting wins."""
    from transformers.integrations.hub_kernels import _kernels_enabled

    from destila.cli import main as cli_main

    monkeypatch.setenv("USE_HUB_KERNELS", "placeholder")  # recorded, so the test's end restores the original
    if given is None:
        monkeypatch.delenv("USE_HUB_KERNELS")
    else:
        monkeypatch.setenv("USE_HUB_KERNELS", given)
    with pytest.raises(SystemExit):
        cli_main.main(["--version"])
    assert os.environ["USE_HUB_KERNELS"] == expected
    assert _kernels_enabled() is (expected == "YES")


def test_one_probe_answers_for_models_datasets_and_harness_tasks(monkeypatch):
    """Models, datasets and harness tasks ask the same probe: an offline switch, or a host that refuses
    (nothing listens on this machine's port 443), is named."""
    from destila.data import sources
    from destila.eval import harness
    from destila.models import hub, loading

    assert sources.hub_offline_reason is hub.hub_offline_reason is harness.hub_offline_reason is loading.hub_offline_reason
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert hub.hub_offline_reason() == "HF_DATASETS_OFFLINE is set"
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    assert hub.hub_host() == "127.0.0.1"
    reason = hub.hub_offline_reason(timeout=2.0)
    assert reason.startswith("127.0.0.1 cannot be reached"), reason
    with pytest.raises(ValueError, match=r"'hellaswag' is a harness task .* cannot be reached \(127\.0\.0\.1 cannot"):
        harness.check_hub_tasks(["hellaswag"])
