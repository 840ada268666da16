"""The few collective operations a multi-process cache build needs, as no-ops for one process.

Under ``torchrun`` (``WORLD_SIZE`` > 1 in the environment) the build joins a
process group: gloo on CPU, nccl on CUDA. Rank 0 owns the cache folder
(lock, manifest); the others only write their own shards and progress file.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from datetime import timedelta

# Errors that rank 0 may find while preparing the folder; the other ranks
# re-raise the same type so every process exits with the same clear message.
_ERROR_TYPES = {cls.__name__: cls for cls in (ValueError, FileNotFoundError, FileExistsError, PermissionError, OSError)}


@dataclass
class Group:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    owns_process_group: bool = False

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def join(device: str) -> tuple[Group, str]:
    """Join the ``torchrun`` process group if there is one; returns the group and this rank's device.

    ``device="cuda"`` becomes ``cuda:LOCAL_RANK`` so that each process on a
    machine drives its own GPU.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Group(), device
    # heavy: torch.distributed, only under torchrun (more than one process)
    import torch
    import torch.distributed as dist

    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device.startswith("cuda"):
        if device == "cuda":
            device = f"cuda:{local_rank}"
        torch.cuda.set_device(torch.device(device))
    owns = False
    if not dist.is_initialized():
        # Ranks meet at a barrier after their last shard; one on a slower device
        # may arrive much later than the others, which must not time out.
        dist.init_process_group(backend="nccl" if device.startswith("cuda") else "gloo", timeout=timedelta(hours=2))
        owns = True
    if dist.get_world_size() != world:
        raise ValueError(f"torchrun: WORLD_SIZE={world} but the process group has {dist.get_world_size()} ranks")
    return Group(rank=rank, world=world, local_rank=local_rank, owns_process_group=owns), device


def barrier(group: Group) -> None:
    if group.world > 1:
        # heavy: torch.distributed, only under torchrun
        import torch.distributed as dist

        dist.barrier()


def share_error(group: Group, error: BaseException | None) -> None:
    """Raise, on every rank, the error rank 0 found (or nothing when it found none).

    Without this, a refusal on rank 0 (say, a mismatched resume) would leave
    the other ranks waiting at the next barrier until a timeout.
    """
    if group.world > 1:
        # heavy: torch.distributed, only under torchrun
        import torch.distributed as dist

        payload = [None if error is None else (type(error).__name__, str(error))]
        dist.broadcast_object_list(payload, src=0)
        if payload[0] is not None and error is None:
            kind, message = payload[0]
            raise _ERROR_TYPES.get(kind, RuntimeError)(message)
    if error is not None:
        raise error


@contextlib.contextmanager
def main_first(group: Group):
    """Run the body on rank 0 first, then on the other ranks (which find its work done, e.g. a token store).

    An error on rank 0 is raised on every rank, as :func:`share_error` does.
    """
    if group.is_main:
        try:
            yield
        except (ValueError, OSError) as err:
            share_error(group, err)
            raise
        share_error(group, None)
    else:
        share_error(group, None)
        yield


def leave(group: Group) -> None:
    if group.owns_process_group:
        # heavy: torch.distributed, only under torchrun
        import torch.distributed as dist

        dist.destroy_process_group()
