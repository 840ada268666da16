"""Whether the Hugging Face hub can be reached now: the one probe models, datasets and harness tasks ask.

transformers, datasets and the harness each retry for tens of seconds
before giving up on a hub that does not answer; a user who names a hub
model, dataset or task without network should hear so at once. The probe
opens one TCP connection to the hub's host (``HF_ENDPOINT``, else the
default endpoint) on port 443 and gives up after :data:`HUB_TIMEOUT_S`.

Naive equivalent::

    socket.create_connection(("huggingface.co", 443), timeout=3)
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

HUB_TIMEOUT_S = 3.0
"""How long the probe waits for the hub's host to answer."""

OFFLINE_SWITCHES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
"""Environment variables that mark the hub as out of reach when set to 1, true, yes or on."""


def hub_host() -> str:
    """The host the hub is reached at: ``HF_ENDPOINT``'s, else huggingface_hub's default endpoint's."""
    endpoint = os.environ.get("HF_ENDPOINT")
    if not endpoint:
        from huggingface_hub import constants  # light, but only needed here

        endpoint = constants.ENDPOINT
    return urlparse(endpoint).hostname or "huggingface.co"


def hub_offline_reason(timeout: float = HUB_TIMEOUT_S) -> str | None:
    """Why the hub cannot be reached now (an offline switch set, or no answer within ``timeout``), or None."""
    for name in OFFLINE_SWITCHES:
        if os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{name} is set"
    host = hub_host()
    outcome: list[str] = []

    def probe():
        try:
            socket.create_connection((host, 443), timeout=timeout).close()
            outcome.append("")
        except OSError as err:
            outcome.append(f"{host} cannot be reached ({err.strerror or err})")

    # getaddrinfo ignores socket timeouts; a thread bounds the whole probe.
    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    if not outcome:
        return f"{host} did not answer within {timeout:.0f} s"
    return outcome[0] or None
