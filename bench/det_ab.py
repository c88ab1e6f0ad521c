#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/det_ab.py: deterministic reductions and fp32 accumulation against the default path.

For each collective, type, rank count and size, braid-perf runs the call on the default
path and with the mode's variable set (BRAID_DETERMINISTIC=1, or BRAID_ACCUMULATE=fp32 for
the narrow types), in turn, round after round. Prints per pair the median time of each over
the rounds (microseconds per call, braid-perf's out-of-place column), the ratio, in how
many rounds the mode was faster and the sign test's two-sided p-value for that
(bench/latency_ab.py explains why rounds: this VM's speed moves between runs). The load
average goes with the table.

  bench/det_ab.py --build build --ranks 4 --bytes 64K,1M,16M --rounds 5
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from latency_ab import first_row, sign_test  # noqa: E402

# (collective, type, the mode's variable)
CASES = [("allreduce", "float", "BRAID_DETERMINISTIC=1"),
         ("reducescatter", "float", "BRAID_DETERMINISTIC=1"),
         ("reduce", "float", "BRAID_DETERMINISTIC=1"),
         ("allreduce", "bfloat16", "BRAID_DETERMINISTIC=1"),
         ("allreduce", "bfloat16", "BRAID_ACCUMULATE=fp32")]


def run(perf, coll, dtype, ranks, size, iters, mode):
    env = dict(os.environ)
    if mode:
        k, v = mode.split("=", 1)
        env[k] = v
    out = subprocess.run([perf, "-C", coll, "-d", dtype, "-N", str(ranks), "-b", size, "-e",
                          size, "-n", str(iters), "-w", "3", "--place", "out", "-c", "0"],
                         capture_output=True, text=True, timeout=600, env=env)
    t = first_row(out.stdout, 5)
    if out.returncode != 0 or t is None:
        sys.exit(f"{coll} {dtype} -N {ranks} {size} {mode} failed:\n{out.stdout}{out.stderr}")
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--ranks", default="4")
    ap.add_argument("--bytes", default="64K,1M,16M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args()
    perf = os.path.join(a.build, "bin", "braid-perf")
    print(f"# processes; load average before: {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f}")
    print("| call | type | ranks | bytes | default us | mode | mode us | ratio | mode faster | p |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ranks in [int(r) for r in a.ranks.split(",")]:
        for coll, dtype, mode in CASES:
            for size in a.bytes.split(","):
                td, tm = [], []
                for _ in range(a.rounds):
                    td.append(run(perf, coll, dtype, ranks, size, a.iters, None))
                    tm.append(run(perf, coll, dtype, ranks, size, a.iters, mode))
                wins = sum(m < d for d, m in zip(td, tm))
                md, mm = statistics.median(td), statistics.median(tm)
                print(f"| {coll} | {dtype} | {ranks} | {size} | {md:.1f} | {mode} | {mm:.1f} | "
                      f"{mm / md:.2f} | {wins}/{a.rounds} | {sign_test(wins, a.rounds):.2f} |",
                      flush=True)
    print(f"# load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")


if __name__ == "__main__":
    main()
