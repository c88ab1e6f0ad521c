#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/algos.py: every algorithm and protocol of one collective, side by side with the
cost model's choice, at several rank counts over simulated hosts.

For each rank count n it runs braid-perf -N n -H hosts (n forked processes, each its own
simulated host unless --hosts says otherwise, so every link goes through the socket
plugin) once per forced (NCCL_ALGO, NCCL_PROTO) pair and once with nothing forced, reads
the cost model's choice for every size from rank 0's TUNING log, and prints one table per
rank count: the time of each pair, the fastest, the model's choice, and how far the
choice's measured time is from the fastest. Every run checks its results (braid-perf -c).
Each run is repeated (--repeat, default 2) and the best time per size is kept.

  bench/algos.py --build-dir build --ranks 4,8,16 --max-size 1M --out /tmp/algos
"""
import argparse
import json
import os
import re
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAIRS = [("Ring", "Simple"), ("Ring", "LL"), ("Tree", "Simple"), ("Tree", "LL"),
         ("RingOneShot", "Simple"), ("RingOneShot", "LL")]


def parse_size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def human(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size


def load_average():
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def run_perf(args, n, env_extra, log=False, max_size=None):
    """Runs braid-perf; returns ({size: time_us}, rank 0's TUNING lines, wrong count)."""
    perf = os.path.join(args.build_dir, "bin", "braid-perf")
    cmd = [perf, "-N", str(n), "-H", str(args.hosts or n), "-C", args.coll, "-b", "8",
           "-e", str(max_size or args.max_size), "-f", "2", "-n", str(args.iters), "-w", "5",
           "-c", "1", "--place", "out", "-T", str(args.timeout)]
    env = dict(os.environ)
    env.update({"NCCL_SOCKET_IFNAME": "lo", "NCCL_NET_PLUGIN": "socket",
                "BRAID_PLUGIN_PATH": os.path.join(args.build_dir, "lib")})
    env.update(env_extra)
    if log:
        env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "TUNING"})
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=args.timeout + 30)
    times, tuning, wrong = {}, [], 0
    for line in p.stdout.splitlines():
        if re.search(r"\[0\] NCCL INFO %s " % re.escape(args.func_name), line):
            tuning.append(line.split("NCCL INFO ", 1)[1])
        f = line.split()
        if len(f) >= 9 and f[0].isdigit():
            times[int(f[0])] = float(f[5])
            wrong += int(f[8]) if f[8].isdigit() else 0
    if p.returncode != 0 or not times:
        sys.exit("braid-perf failed (rc %d): %s\n%s" % (p.returncode, " ".join(cmd),
                                                         p.stdout[-3000:]))
    return times, tuning, wrong


def model_choices(tuning):
    """[(lo, hi, 'Algo/Proto')] from the TUNING range lines."""
    units = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20}
    out = []
    for line in tuning:
        m = re.match(r"\S+ (\d+) (B|KiB|MiB) - (\d+) (B|KiB|MiB): (\S+)/(\w+),", line)
        if m:
            lo = int(m.group(1)) * units[m.group(2)]
            hi = int(m.group(3)) * units[m.group(4)]
            out.append((lo, hi, "%s/%s" % (m.group(5), m.group(6))))
    return out


def choice_at(ranges, size):
    for lo, hi, what in ranges:
        if lo <= size <= hi:
            return what
    return "?"


def measure(args, n):
    best = {}
    every = {}
    wrong = 0
    choices = []
    for rnd in range(args.repeat):
        for algo, proto in PAIRS + [(None, None)]:
            key = "%s/%s" % (algo, proto) if algo else "model"
            env = {"NCCL_ALGO": algo, "NCCL_PROTO": proto} if algo else {}
            if algo == "RingOneShot" and args.coll != "allreduce":
                continue
            # RingOneShot takes AllReduce inputs of at most 16 KiB.
            cap = min(args.max_size, 16 << 10) if algo == "RingOneShot" else None
            times, tuning, w = run_perf(args, n, env, log=algo is None and rnd == 0,
                                        max_size=cap)
            wrong += w
            if algo is None and rnd == 0:
                choices = model_choices(tuning)
            cur = best.setdefault(key, {})
            for size, t in times.items():
                cur[size] = min(cur.get(size, t), t)
                every.setdefault(key, {}).setdefault(size, []).append(t)
            print("  n=%d round %d %-18s done (load %.2f)" % (n, rnd + 1, key, load_average()),
                  flush=True)
    return best, every, choices, wrong


def spread(every, key, size):
    """How far apart the rounds of one column at one size were (slowest / fastest)."""
    ts = every.get(key, {}).get(size, [])
    return max(ts) / min(ts) if ts and min(ts) > 0 else 1.0


def table(n, best, every, choices, limit):
    sizes = sorted(best["model"])
    cols = [k for k in ["%s/%s" % p for p in PAIRS] if k in best]
    lines = ["| size | " + " | ".join(cols) +
             " | fastest | model's choice | choice vs fastest | noise |",
             "|---|" + "---|" * (len(cols) + 4)]
    misses = 0
    for s in sizes:
        row = {c: best[c].get(s) for c in cols}
        avail = {c: t for c, t in row.items() if t is not None}
        fastest = min(avail, key=avail.get)
        choice = choice_at(choices, s)
        chosen_t = avail.get(choice)
        ratio = chosen_t / avail[fastest] if chosen_t else None
        # The rounds of the two columns compared: how much one column moved between
        # rounds at this size (slowest over fastest round).
        noise = max(spread(every, fastest, s), spread(every, choice, s))
        mark = ""
        if ratio is not None and ratio > limit:
            misses += 1
            mark = " **miss**" if ratio > noise else " miss, within noise"
        cells = ["%.1f" % row[c] if row[c] is not None else "-" for c in cols]
        lines.append("| %s | %s | %s | %s | %s%s | %.2fx |" % (
            human(s), " | ".join(cells), fastest, choice,
            "%.2fx" % ratio if ratio else "n/a", mark, noise))
    return "\n".join(lines), misses


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    ap.add_argument("--ranks", default="4,8,16")
    ap.add_argument("--hosts", type=int, default=0,
                    help="simulated hosts (default: one per rank)")
    ap.add_argument("--coll", default="allreduce")
    ap.add_argument("--max-size", type=parse_size, default=1 << 20)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--limit", type=float, default=1.10,
                    help="a choice slower than this times the fastest is a miss")
    ap.add_argument("--out", default=None, help="directory for table.md and results.json")
    args = ap.parse_args()
    args.func_name = {"allreduce": "AllReduce", "broadcast": "Broadcast",
                      "reduce": "Reduce", "allgather": "AllGather",
                      "reducescatter": "ReduceScatter"}[args.coll]
    report = ["# %s, braid-perf -H (simulated hosts, socket plugin), out of place, best of %d"
              % (args.func_name, args.repeat),
              "", "Load average before: %.2f. Times in microseconds." % load_average(), ""]
    results = {}
    total_miss = 0
    for n in [int(x) for x in args.ranks.split(",")]:
        t0 = time.time()
        best, every, choices, wrong = measure(args, n)
        text, misses = table(n, best, every, choices, args.limit)
        total_miss += misses
        results[n] = {"best": best, "every": every, "choices": choices, "wrong": wrong}
        report += ["## %d ranks on %d hosts (%.0f s, %d wrong elements)" % (
            n, args.hosts or n, time.time() - t0, wrong), "", text, ""]
    report.append("Load average after: %.2f. Choices more than %.0f %% slower than the "
                  "fastest: %d. The noise column is how far the rounds of the two columns "
                  "compared moved at that size (slowest round / fastest round)."
                  % (load_average(), (args.limit - 1) * 100, total_miss))
    text = "\n".join(report)
    print(text)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "table.md"), "w") as f:
            f.write(text + "\n")
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump({str(k): v for k, v in results.items()}, f, indent=1)


if __name__ == "__main__":
    main()
