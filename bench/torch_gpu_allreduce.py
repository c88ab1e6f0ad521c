#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/torch_gpu_allreduce.py: torch.distributed.all_reduce of float32 CUDA tensors,
Braid (PyTorch's "nccl" backend with Braid's libnccl.so.2 preloaded) next to PyTorch's
Gloo backend on the same tensors, 2 processes on one GPU by default.

Run it under torchrun once per backend; rank 0 prints one line per size (8 B to --largest,
x4 steps): mean time per call over --iters calls after warm-up (CUDA synchronised, the
maximum over the ranks), algbw and busbw by nccl-tests' formula (busbw = algbw x
2(n-1)/n). Each size is checked once on fresh data before it is timed.

    LD_PRELOAD=build/lib/libnccl.so.2 torchrun --standalone --nproc_per_node=2 \\
        bench/torch_gpu_allreduce.py --backend nccl
    torchrun --standalone --nproc_per_node=2 bench/torch_gpu_allreduce.py --backend gloo

tests/gpu/run.sh runs both and writes the tables to its results.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="nccl")
    # Not "--max": torchrun 2.x (Python 3.12) takes it for an abbreviation of its own
    # --max-restarts even after the script's name.
    ap.add_argument("--largest", type=int, default=1 << 30, help="largest size in bytes")
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    dist.init_process_group(args.backend)
    rank, n = dist.get_rank(), dist.get_world_size()
    dev = rank % torch.cuda.device_count()
    torch.cuda.set_device(dev)
    lib = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libnccl" in l})
    if rank == 0:
        print(f"# {args.backend}, {n} processes, libnccl: {lib or 'none'}", flush=True)
        print("| bytes | time (us) | algbw (GB/s) | busbw (GB/s) |\n|---|---|---|---|", flush=True)
    size = 8
    while size <= args.largest:
        count = size // 4
        t = torch.full((count,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        torch.cuda.synchronize()
        want = n * (n + 1) / 2
        if count and not torch.all(t == want):
            raise SystemExit(f"rank {rank}: all_reduce of {size} bytes is wrong "
                             f"({t[0].item()} where {want} was expected)")
        iters = args.iters if size < (64 << 20) else max(3, args.iters // 4)
        for _ in range(2):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(t)
        torch.cuda.synchronize()
        mean = torch.tensor([(time.perf_counter() - start) / iters * 1e6],
                            device=dev if args.backend == "nccl" else "cpu")
        dist.all_reduce(mean, op=dist.ReduceOp.MAX)
        us = mean.item()
        if rank == 0:
            alg = size / us / 1e3
            print(f"| {size} | {us:.1f} | {alg:.3f} | {alg * 2 * (n - 1) / n:.3f} |", flush=True)
        del t
        size *= 4
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
