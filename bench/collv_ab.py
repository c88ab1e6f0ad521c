#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/collv_ab.py: Braid's v-collectives against the same exchange as grouped send/recv.

For each rank count and size, braid-perf runs braidAlltoAllV (alltoallv) and the grouped
ncclSend/ncclRecv alltoall (alltoall_p2p) in turn, round after round, and the same for
braidAllGatherV (allgatherv) and allgather_p2p; equal counts per rank, so both move exactly
the same bytes. Prints per pair the median time of each over the rounds (microseconds per
call, braid-perf's out-of-place column), the ratio, in how many rounds the v-collective
was faster and the sign test's two-sided p-value for that (bench/latency_ab.py explains
why rounds: this VM's speed moves between runs). The load average goes with the table.

  bench/collv_ab.py --build build --ranks 2,4,8 --bytes 4K,64K,1M,16M --rounds 5
"""
import argparse
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from latency_ab import first_row, sign_test  # noqa: E402

PAIRS = [("alltoallv", "alltoall_p2p"), ("allgatherv", "allgather_p2p")]


def run(perf, coll, ranks, size, iters, threads):
    layout = ["-t", str(ranks)] if threads else ["-N", str(ranks)]
    out = subprocess.run([perf, "-C", coll] + layout + ["-b", size, "-e", size,
                          "-n", str(iters), "-w", "3", "--place", "out", "-c", "0"],
                         capture_output=True, text=True, timeout=600)
    t = first_row(out.stdout, 5)
    if out.returncode != 0 or t is None:
        sys.exit(f"{coll} -N {ranks} {size} failed:\n{out.stdout}{out.stderr}")
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--ranks", default="2,4,8")
    ap.add_argument("--bytes", default="4K,64K,1M,16M")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--colls", default="alltoallv,allgatherv",
                    help="which v-collectives to compare (each with its grouped form)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--threads", action="store_true",
                    help="ranks as threads of one process (ncclCommInitAll), not processes")
    a = ap.parse_args()
    perf = os.path.join(a.build, "bin", "braid-perf")
    print(f"# {'threads' if a.threads else 'processes'}; load average before: "
          f"{os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")
    print("| ranks | bytes | v-collective | us | grouped send/recv | us | ratio | v faster | p |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ranks in [int(r) for r in a.ranks.split(",")]:
        for size in a.bytes.split(","):
            for v, p2p in [pr for pr in PAIRS if pr[0] in a.colls.split(",")]:
                tv, tp = [], []
                for _ in range(a.rounds):
                    tv.append(run(perf, v, ranks, size, a.iters, a.threads))
                    tp.append(run(perf, p2p, ranks, size, a.iters, a.threads))
                wins = sum(x < y for x, y in zip(tv, tp))
                mv, mp = statistics.median(tv), statistics.median(tp)
                print(f"| {ranks} | {size} | {v} | {mv:.1f} | {p2p} | {mp:.1f} | "
                      f"{mv / mp:.2f} | {wins}/{a.rounds} | {sign_test(wins, a.rounds):.2f} |",
                      flush=True)
    print(f"# load average after: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}")


if __name__ == "__main__":
    main()
