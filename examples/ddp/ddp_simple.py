# SPDX-License-Identifier: Apache-2.0
"""ddp_simple, on the CPU: the smallest DistributedDataParallel program of GPU MODE's
lecture 17 (NCCL), with the GPU replaced by the CPU and NCCL by Braid.

The model is y = w * 7 * x with one parameter w = 5. Rank r feeds x = r, so its own
dy/dw is 7 * r; DDP averages the gradient over the ranks, so with 2 ranks every rank
prints "reduced dy/dw: 3.5" (with n ranks, 7 * (n - 1) / 2).

    python3 -m torch.distributed.run --nproc_per_node=2 examples/ddp/ddp_simple.py

(torchrun, PyTorch 2.x.) --backend gloo runs the same on Gloo; --trace FILE writes the
profiler's Chrome trace from rank 0, as the lecture's program does.
"""
import argparse
import contextlib
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import profile


def say(line):
    # One write per line, so that the ranks' lines do not interleave on a shared pipe.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(5.0))

    def forward(self, x):
        return self.w * 7.0 * x


def main():
    ap = argparse.ArgumentParser(description="DDP on one scalar parameter")
    ap.add_argument("--backend", default="braid")
    ap.add_argument("--trace", help="write rank 0's profiler trace (Chrome JSON) here")
    args = ap.parse_args()
    if args.backend == "braid":
        import braid_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    say(f"Start running basic DDP example on rank {rank}.")

    ddp_model = DDP(ToyModel())  # CPU module: no device_ids
    prof = profile() if args.trace else None  # the profiler only when a trace is asked for
    with prof or contextlib.nullcontext():
        x = torch.tensor(float(rank))
        y = ddp_model(x)
        w = ddp_model.module.w.item()
        say(f"rank {rank}: y=w*7*x: {y.item()}={w}*7*{x.item()}")
        say(f"rank {rank}: dy/dw=7*x: {7.0 * x.item()}")
        y.backward()
        say(f"rank {rank}: reduced dy/dw: {ddp_model.module.w.grad.item()}")
    if rank == 0 and args.trace:
        prof.export_chrome_trace(args.trace)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
