#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/torch_compare.py: the "braid" torch.distributed backend against "gloo", in PyTorch.

PyTorch 2.x (2.13 as CI installs it). One torchrun launch per rank count runs both
backends in the same processes on the same tensors: the world group on "braid" and a
second group of the same ranks on "gloo". For each float32 size from 8 B to 256 MiB (x4
steps) it times dist.all_reduce (SUM, in place; --colls adds dist.all_gather_into_tensor
and dist.broadcast from root 0) on each backend, as nccl-tests does: warm-up, barrier, n
calls back to back, mean time per call, maximum over the ranks; bus bandwidth by
nccl-tests' formulas (all_gather's size is its output).
Each size is checked once on fresh data first. Then braid-perf times the same
all-reduces without PyTorch (in place), so the binding's cost shows, and
examples/ddp/ddp_example.py gives the mean DDP step time on each backend.

    /usr/bin/python3 bench/torch_compare.py [--ranks 2,4] [--max-size 256M] [--out DIR]
        [--colls all_reduce,all_gather_into_tensor,broadcast]

Needs a build with braid_torch (cmake --build build). Prints the tables (markdown) and
writes results.json into --out.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1 << 20
COLLS = ["all_reduce", "all_gather_into_tensor", "broadcast"]


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def human(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def sizes(max_size):
    s, out = 8, []
    while s <= max_size:
        out.append(s)
        s *= 4
    if out[-1] != max_size:
        out.append(max_size)
    return out


def iterations(size):
    """About 1 GiB moved per measurement, between 3 and 200 calls."""
    return max(3, min(200, (1 << 30) // size))


# ---------------------------------------------------------------------------------------
# Worker: runs under torchrun.


def worker(args):
    import torch
    import torch.distributed as dist

    import braid_torch  # noqa: F401  (registers the backend)

    dist.init_process_group("braid")
    rank, n = dist.get_rank(), dist.get_world_size()
    groups = {"braid": None, "gloo": dist.new_group(backend="gloo")}
    results = []

    def call(coll, t, out, g):
        if coll == "all_reduce":
            dist.all_reduce(t, group=g)
        elif coll == "broadcast":
            dist.broadcast(t, 0, group=g)
        else:
            dist.all_gather_into_tensor(out, t, group=g)

    def tensors(coll, size):
        # all_gather's size is its output, as in nccl-tests; at least one float per rank.
        count = max(1, size // 4 // n) if coll == "all_gather_into_tensor" else size // 4
        t = torch.full((count,), float(rank + 1))
        out = torch.empty(count * n) if coll == "all_gather_into_tensor" else None
        return t, out

    def correct(coll, t, out):
        if coll == "all_reduce":
            return bool((t == n * (n + 1) / 2).all())
        if coll == "broadcast":
            return bool((t == 1.0).all())
        want = torch.arange(1, n + 1, dtype=torch.float32).repeat_interleave(t.numel())
        return torch.equal(out, want)

    for size in sizes(args.max_size):
        for coll in args.colls.split(","):
            for backend, g in groups.items():
                t, out = tensors(coll, size)
                call(coll, t, out, g)
                ok = correct(coll, t, out)
                iters = iterations(size)
                for _ in range(2):
                    call(coll, t, out, g)
                dist.barrier(group=g)
                start = time.perf_counter()
                for _ in range(iters):
                    call(coll, t, out, g)
                per_call = torch.tensor([(time.perf_counter() - start) / iters, 0.0 if ok else 1.0])
                dist.all_reduce(per_call, op=dist.ReduceOp.MAX, group=groups["gloo"])
                nbytes = (out if out is not None else t).numel() * 4
                results.append({"coll": coll, "backend": backend, "size": nbytes,
                                "time_us": per_call[0].item() * 1e6, "ok": per_call[1].item() == 0})
                del t, out
    if rank == 0:
        with open(args.worker_out, "w") as f:
            json.dump(results, f)
    dist.destroy_process_group()


# ---------------------------------------------------------------------------------------
# Driver.


def busbw(coll, n, size, time_us):
    factor = {"all_reduce": 2.0 * (n - 1) / n, "all_gather_into_tensor": (n - 1) / n}
    return size / (time_us * 1e-6) / 1e9 * factor.get(coll, 1.0)


def torchrun(n, argv, env):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={n}",
           "--rdzv_backend=c10d", "--rdzv_endpoint=localhost:0", "--monitor_interval=0.2"] + argv
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{run.stdout}{run.stderr}")
    return run.stdout


def braid_perf(args, n, env):
    """braid-perf's in-place all-reduce per size: [time (us), busbw (GB/s)]."""
    todo = sizes(args.max_size)
    ranges = [(todo[0], todo[-2] if todo[-1] != todo[-2] * 4 else todo[-1])]
    if ranges[0][1] != todo[-1]:
        ranges.append((todo[-1], todo[-1]))  # the last size when it is off the x4 steps
    rows = {}
    for lo, hi in ranges:
        out = subprocess.run([os.path.join(args.build, "bin", "braid-perf"), "-C", "allreduce",
                              "-N", str(n), "-b", str(lo), "-e", str(hi), "-f", "4",
                              "--place", "in", "-n", "20", "-w", "2"],
                             env=env, check=True, capture_output=True, text=True).stdout
        for line in out.splitlines():
            f = line.split()
            if len(f) == 13 and f[0].isdigit():
                rows[int(f[0])] = [float(f[9]), float(f[11])]
    return rows


def ddp_step_ms(args, n, backend, env):
    out = torchrun(n, [os.path.join(REPO, "examples", "ddp", "ddp_example.py"), "--backend",
                       backend, "--size", str(args.ddp_size), "--batch", str(args.ddp_batch),
                       "--steps", str(args.ddp_steps)], env)
    return float(re.search(r"([\d.]+) ms per step", out).group(1))


SMALL = 8 << 10  # up to this size the tables give the time per call, above it busbw


def table(coll, runs):
    """One markdown table of coll: a row per size, the rank counts side by side; time per
    call (us) up to SMALL, bus bandwidth (GB/s) above; all_reduce also next to braid-perf."""
    ns = sorted(runs, key=int)
    head = "| size |"
    for n in ns:
        head += f" braid {n}p | gloo {n}p | braid/gloo |"
        head += f" braid-perf {n}p | torch/perf |" if coll == "all_reduce" else ""
    lines = [head, "|---:|" + "---:|" * (head.count("|") - 2)]
    per_n = {}
    for n in ns:
        rows = [r for r in runs[n]["rows"] if r["coll"] == coll]
        by = {(r["backend"], r["size"]): r for r in rows}
        per_n[n] = [(size, by[("braid", size)], by[("gloo", size)])
                    for size in sorted({r["size"] for r in rows})]
    for i in range(len(per_n[ns[0]])):
        cells, names = "", []
        for n in ns:
            size, b, g = per_n[n][i]
            names.append(human(size))
            small = size <= SMALL

            def show(time_us):
                return (f"{time_us:.1f} us" if small else
                        f"{busbw(coll, int(n), size, time_us):.2f}")
            bad = "" if b["ok"] and g["ok"] else " WRONG"
            cells += f" {show(b['time_us'])} | {show(g['time_us'])} | "
            cells += f"{g['time_us'] / b['time_us']:.1f}x{bad} |"
            if coll == "all_reduce":
                p = runs[n]["braid_perf"].get(str(size), runs[n]["braid_perf"].get(size))
                cells += (f" {show(p[0])} | {p[0] / b['time_us']:.2f} |" if p else " - | - |")
        label = names[0] if len(set(names)) == 1 else " / ".join(names)
        lines.append(f"| {label} |{cells}")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--max-size", default="256M", type=parse_size)
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--out", default="torch-bench")
    ap.add_argument("--colls", default="all_reduce",
                    help="comma-separated, of " + ",".join(COLLS))
    ap.add_argument("--ddp-size", type=int, default=1024)
    ap.add_argument("--ddp-batch", type=int, default=256)
    ap.add_argument("--ddp-steps", type=int, default=11)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    os.makedirs(args.out, exist_ok=True)
    env = dict(os.environ, NCCL_SOCKET_IFNAME="lo",
               PYTHONPATH=os.path.join(args.build, "python"),
               LD_LIBRARY_PATH=os.path.join(args.build, "lib"))
    load = os.getloadavg()
    report = {"load_before": load, "runs": {}}
    print(f"# torch_compare: load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, "
          f"{os.cpu_count()} CPUs", flush=True)
    for n in args.ranks.split(","):
        wout = os.path.join(args.out, f"worker-{n}.json")
        torchrun(int(n), [os.path.abspath(__file__), "--worker", "--worker-out", wout,
                          "--max-size", str(args.max_size), "--colls", args.colls], env)
        with open(wout) as f:
            rows = json.load(f)
        report["runs"][n] = {"rows": rows, "braid_perf": braid_perf(args, int(n), env),
                             "ddp_step_ms": {b: ddp_step_ms(args, int(n), b, env)
                                             for b in ("braid", "gloo")}}
        print(f"# {n} processes done", flush=True)
    for coll in args.colls.split(","):
        print(f"\n{coll}: time per call up to {human(SMALL)}, busbw (GB/s) above\n")
        print(table(coll, report["runs"]), flush=True)
    for n, run in report["runs"].items():
        ddp = run["ddp_step_ms"]
        print(f"\nddp_example, {n} processes (size {args.ddp_size}, batch {args.ddp_batch}, "
              f"{args.ddp_steps} steps): braid {ddp['braid']:.1f} ms per step, "
              f"gloo {ddp['gloo']:.1f} ms per step")
    report["load_after"] = os.getloadavg()
    print(f"\n# load average after: {report['load_after'][0]:.2f} "
          f"{report['load_after'][1]:.2f} {report['load_after'][2]:.2f}")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
