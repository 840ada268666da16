"""Running out of memory under an address-space limit (``ulimit -v``): one line, never a hang or a traceback.

torch, transformers and the BLAS libraries they load reserve far more
address space than they touch (a tiny model's ``destila train`` peaks near
2.5 GB of virtual memory for 0.6 GB resident). Under ``ulimit -v`` an import
then fails (``ImportError: … failed to map segment``), an allocation raises
``MemoryError``, or torch's allocator raises ``RuntimeError: … can't allocate
memory``: :func:`memory_failure` turns each into one line that names the
limit. Below about 0.85 GB, OpenBLAS's start-up (imported with scipy) retries
a failed ``mmap`` forever, so :func:`check_address_space` refuses such a
limit before anything heavy is imported.

Measured with the tests' tiny Llama, ``destila train … --max_steps 1``:
``ulimit -v`` 800000 KB hangs in OpenBLAS, 900000-1100000 KB fail at import,
1200000-1300000 KB raise MemoryError, 1500000 KB trains.
"""

from __future__ import annotations

import resource

MIN_ADDRESS_SPACE = 1 << 30
"""Below this limit the libraries' start-up can hang (see above): refused at once."""

_MEMORY_TEXT = ("failed to map segment", "cannot allocate memory", "can't allocate memory", "out of memory")


def address_space_limit() -> int | None:
    """The soft ``RLIMIT_AS`` in bytes, or None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft


def _advice(limit: int | None) -> str:
    if limit is None:
        return "free memory, or use a smaller model, batch or --seq-len"
    return (f"the process may reserve at most {limit / 2**30:.2f} GiB of address space (ulimit -v), and torch and "
            "its libraries reserve much more than they use; raise or remove that limit (ulimit -v unlimited) and "
            "bound resident memory instead (a cgroup: systemd-run --scope -p MemoryMax=…, or docker --memory)")


def check_address_space() -> str | None:
    """The error line for an address-space limit too small to start in, or None."""
    limit = address_space_limit()
    if limit is not None and limit < MIN_ADDRESS_SPACE:
        return f"not enough address space to start: {_advice(limit)}"
    return None


def memory_failure(err: BaseException) -> str | None:
    """The error line when ``err`` means the process ran out of memory, else None."""
    if isinstance(err, MemoryError) or (isinstance(err, (ImportError, RuntimeError, OSError))
                                        and any(text in str(err) for text in _MEMORY_TEXT)):
        text = str(err).strip().splitlines()
        return f"out of memory ({type(err).__name__}: {text[0] if text else 'no details'}); " \
               f"{_advice(address_space_limit())}"
    return None
