"""Every benchmark row names the machine it ran on, the GPU included, and a command a reader can retype."""

import sys

import torch

from destila.bench.results import machine_info


def test_a_module_run_is_recorded_as_the_destila_command(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/somewhere/destila/__main__.py", "bench", "e2e", "--steps", "4"])
    assert machine_info()["command"] == "destila bench e2e --steps 4"


def test_the_gpu_is_named_or_none(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    assert machine_info()["gpu"] == "NVIDIA H200"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert machine_info()["gpu"] is None
