# SPDX-License-Identifier: Apache-2.0
"""braid_torch: Braid as the torch.distributed backend "braid", for CPU tensors.

    import braid_torch  # registers the backend
    torch.distributed.init_process_group("braid")               # every CPU collective
    torch.distributed.init_process_group("cpu:braid,cuda:nccl")  # CPU on Braid, GPU on NCCL

Collectives run on Braid's host-memory path (libnccl.so.2 built by this repository),
on one communication thread per process group. docs/pytorch.md says what is supported.
"""
import torch
import torch.distributed as dist

from . import _C

__all__ = ["ProcessGroupBraid", "nccl_version"]

ProcessGroupBraid = _C.ProcessGroupBraid


def nccl_version():
    """The NCCL version Braid reports (ncclGetVersion), as an integer such as 22809."""
    return _C.nccl_version()


def _create(store, rank, size, timeout):
    # torch.distributed hands over the group's own prefix store and its timeout.
    return ProcessGroupBraid(store, rank, size, timeout)


if not hasattr(dist.Backend, "BRAID"):
    # A backend for CPU tensors only: GPU tensors go to the backend named for "cuda".
    dist.Backend.register_backend("braid", _create, devices=["cpu"])
