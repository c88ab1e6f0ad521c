# SPDX-License-Identifier: Apache-2.0
"""ddp_simple: the smallest DistributedDataParallel program of GPU MODE's lecture 17
(NCCL), on GPUs, as the lecture runs it, except that rank r uses device
r % torch.cuda.device_count() (so 2 processes share one GPU where there is one).

The model is y = w * 7 * x with one parameter w = 5. Rank r feeds x = r, so its own
dy/dw is 7 * r; DDP averages the gradient over the ranks, so with 2 ranks every rank
prints "reduced dy/dw: 3.5".

    LD_PRELOAD=build/lib/libnccl.so.2 torchrun --nproc_per_node=2 examples/ddp/gpu/ddp_simple.py

puts Braid under the "nccl" backend (examples/ddp/gpu/run_gpu.sh runs and checks it).
--trace FILE writes rank 0's profiler trace (Chrome JSON), as the lecture's program does.
"""
import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class ToyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.tensor(5.0))

    def forward(self, x):
        return self.w * 7.0 * x


def main():
    ap = argparse.ArgumentParser(description="DDP on one scalar parameter, on GPUs")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--trace", default="trace_ddp_simple.json")
    args = ap.parse_args()
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    torch.cuda.set_device(device_id)
    say(f"Start running basic DDP example on rank {rank} (device {device_id}).")

    ddp_model = DDP(ToyModel().to(device_id), device_ids=[device_id])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        x = torch.tensor(float(rank), device=device_id)
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
