# SPDX-License-Identifier: Apache-2.0
"""ddp_example: the DistributedDataParallel training loop of GPU MODE's lecture 17 (NCCL),
on GPUs, except that rank r uses device r % torch.cuda.device_count().

Three 4000 x 4000 linear layers with ReLUs between, MSE loss against random labels, SGD
(lr 0.001), 10 steps of a batch of 1000, DDP with 25 MB buckets. Inputs are seeded per
rank and the model by --seed, so runs on different backends see the same numbers.

    LD_PRELOAD=build/lib/libnccl.so.2 torchrun --nproc_per_node=2 examples/ddp/gpu/ddp_example.py

--save PATTERN writes each rank's final parameters to PATTERN.format(rank=rank); --trace
FILE writes rank 0's profiler trace; rank 0 prints the mean step time after the first
(warm-up) step, with the GPU synchronised at the end of each step.
"""
import argparse
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


def main():
    ap = argparse.ArgumentParser(description="DDP training of a 3-layer MLP on GPUs")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--size", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", help="pattern of the files for each rank's final parameters")
    ap.add_argument("--trace", default="trace_ddp_example.json")
    args = ap.parse_args()
    dist.init_process_group(args.backend)
    rank = dist.get_rank()
    device_id = rank % torch.cuda.device_count()
    torch.cuda.set_device(device_id)
    print(f"Start running basic DDP example on rank {rank} (device {device_id}).", flush=True)

    torch.manual_seed(args.seed)
    model = ToyModel(args.size).to(device_id)
    ddp_model = DDP(model, device_ids=[device_id], bucket_cap_mb=25)
    loss_fn = nn.MSELoss()
    optimizer = optim.SGD(ddp_model.parameters(), lr=0.001)
    gen = torch.Generator(device=f"cuda:{device_id}").manual_seed(args.seed + 1 + rank)
    times = []
    with profile(record_shapes=True,
                 activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(args.steps):
            start = time.perf_counter()
            optimizer.zero_grad()
            outputs = ddp_model(torch.randn(args.batch, args.size, device=device_id,
                                            generator=gen))
            labels = torch.randn(args.batch, args.size, device=device_id, generator=gen)
            loss_fn(outputs, labels).backward()
            optimizer.step()
            torch.cuda.synchronize(device_id)
            times.append(time.perf_counter() - start)
    if rank == 0:
        steady = times[1:] or times
        print(f"{args.backend}: world {dist.get_world_size()} size {args.size} "
              f"batch {args.batch}: {1e3 * sum(steady) / len(steady):.2f} ms per step "
              f"(mean of steps 2-{len(times)})", flush=True)
        if args.trace:
            prof.export_chrome_trace(args.trace)
    if args.save:
        torch.save([p.detach().cpu() for p in ddp_model.parameters()],
                    args.save.format(rank=rank))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
