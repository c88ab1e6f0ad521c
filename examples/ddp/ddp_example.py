# SPDX-License-Identifier: Apache-2.0
"""ddp_example, on the CPU: the DistributedDataParallel training loop of GPU MODE's
lecture 17 (NCCL), with the GPU replaced by the CPU and NCCL by Braid.

Three SIZE x SIZE linear layers with ReLUs between, MSE loss against random labels, SGD
(lr 0.001), 10 steps of a batch of 1000, DDP with 25 MB buckets: as the lecture's
program, whose SIZE is 4000. That takes minutes per step on a small CPU, so --size
(and --batch) take smaller values. Inputs are seeded per rank, and the model by --seed,
so two runs on different backends see the same numbers.

    python3 -m torch.distributed.run --nproc_per_node=2 examples/ddp/ddp_example.py --size 256

--save PATTERN writes each rank's final parameters (torch.save of a list) to
PATTERN.format(rank=rank); --trace FILE writes rank 0's profiler trace; rank 0 prints
the mean step time after the first (warm-up) step.
"""
import argparse
import contextlib
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.optim as optim
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile


class ToyModel(nn.Module):
    def __init__(self, size):
        super().__init__()
        self.net1 = nn.Linear(size, size)
        self.relu = nn.ReLU()
        self.net2 = nn.Linear(size, size)
        self.net3 = nn.Linear(size, size)

    def forward(self, x):
        return self.net3(self.relu(self.net2(self.relu(self.net1(x)))))


def train(args, rank):
    torch.manual_seed(args.seed)
    ddp_model = DDP(ToyModel(args.size), bucket_cap_mb=25)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    gen = torch.Generator().manual_seed(args.seed + 1 + rank)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        outputs = ddp_model(torch.randn(args.batch, args.size, generator=gen))
        labels = torch.randn(args.batch, args.size, generator=gen)
        loss_fn(outputs, labels).backward()
        optimizer.step()
        times.append(time.perf_counter() - start)
    return ddp_model, times


def main():
    ap = argparse.ArgumentParser(description="DDP training of a 3-layer MLP on the CPU")
    ap.add_argument("--backend", default="braid")
    ap.add_argument("--size", type=int, default=4000, help="layer width (lecture: 4000)")
    ap.add_argument("--batch", type=int, default=1000, help="batch per rank (lecture: 1000)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="pattern of the files for each rank's final parameters")
    ap.add_argument("--trace", help="write rank 0's profiler trace (Chrome JSON) here")
    args = ap.parse_args()
    if args.backend == "braid":
        import braid_torch  # noqa: F401  (registers the backend)
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    print(f"Start running basic DDP example on rank {rank}.", flush=True)

    # Profiled only when a trace is asked for: the profiler slows every step.
    prof = profile(record_shapes=True, activities=[ProfilerActivity.CPU]) if args.trace else None
    with prof or contextlib.nullcontext():
        ddp_model, times = train(args, rank)
    if rank == 0:
        steady = times[1:] or times
        print(f"{args.backend}: size {args.size} batch {args.batch}: "
              f"{1e3 * sum(steady) / len(steady):.2f} ms per step "
              f"(mean of steps 2-{len(times)})", flush=True)
        if args.trace:
            prof.export_chrome_trace(args.trace)
    if args.save:
        torch.save([p.detach() for p in ddp_model.parameters()], args.save.format(rank=rank))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
