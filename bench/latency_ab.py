#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""bench/latency_ab.py: small-call latency of Braid builds and Open MPI vader, in turn.

On a small VM one run of an 8-byte benchmark moves by 2x with where the host puts the
vCPUs at that moment, so two builds compared one after the other say little. This runs
every build (and vader) once per round, round after round, and prints the median and the
minimum of each over the rounds: the builds share the machine's moods. Each later column
is then set against the first round by round: in how many rounds it was faster, and the
sign test's two-sided p-value for that count (a difference that a 5-round A/B showed
here more than once and 10 rounds took back scores p > 0.3; 9 of 10 rounds is p = 0.02).

  bench/latency_ab.py --coll allgather --ranks 2 --rounds 10 \\
      base=/tmp/base-build new=build-bench

Each build is a directory with bin/braid-perf and lib/ (a build tree, or bin and lib
copied out of one: the copy keeps a build from before a change). vader needs mpirun and
the mpi_bench that bench/compare builds (--mpi-bench, default build-bench/bench).
"""
import argparse
import math
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def first_row(text, col):
    """The value in column `col` of the first result row (one that starts with a size)."""
    for line in text.splitlines():
        f = line.split()
        if f and f[0].isdigit() and len(f) > col:
            return float(f[col])
    return None


def sign_test(wins, n):
    """Two-sided p-value of `wins` rounds out of n under a fair coin."""
    if n == 0:
        return 1.0
    k = min(wins, n - wins)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--coll", default="allgather",
                    choices=["allreduce", "allgather", "broadcast", "reducescatter", "reduce",
                             "alltoallv"])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--threads", action="store_true",
                    help="ranks as threads of one process (braid builds only: implies --no-vader)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--bytes", default="8")
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--warm", type=int, default=2000,
                    help="warm-up calls per run (default 2000; fewer for large --bytes)")
    ap.add_argument("--mpi-bench", default=os.path.join(HERE, "..", "build-bench", "bench",
                                                        "mpi_bench"))
    ap.add_argument("--no-vader", action="store_true")
    ap.add_argument("builds", nargs="+", metavar="LABEL=DIR")
    args = ap.parse_args()

    dtype = "float" if args.coll in ("allreduce", "reducescatter", "reduce", "alltoallv") \
        else "uint8"
    layout = ["-t" if args.threads else "-N", str(args.ranks)]
    common = ["-b", args.bytes, "-e", args.bytes, "-n", str(args.iters), "-w", str(args.warm),
              "-c", "0"]
    runs = []
    for b in args.builds:
        label, _, d = b.partition("=")
        if not d or not os.path.exists(os.path.join(d, "bin", "braid-perf")):
            sys.exit("latency_ab: %s: no bin/braid-perf under %r" % (label, d))
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(d, "lib"))
        runs.append((label, [os.path.join(d, "bin", "braid-perf"), "-C", args.coll] + layout +
                     ["-d", dtype, "--place", "out"] + common, env))
    if not args.no_vader and not args.threads:
        if not os.path.exists(args.mpi_bench):
            sys.exit("latency_ab: no %s (run bench/compare once, or --no-vader)" % args.mpi_bench)
        runs.append(("vader", ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np",
                               str(args.ranks), "--bind-to", "none", "--mca", "pml", "ob1",
                               "--mca", "btl", "self,vader", args.mpi_bench, "-C", args.coll]
                     + common, dict(os.environ)))

    times = {label: [] for label, _, _ in runs}
    for _ in range(args.rounds):
        for label, cmd, env in runs:
            out = subprocess.run(cmd, env=env, capture_output=True, text=True).stdout
            t = first_row(out, 5)  # time per call, us (both programs print it sixth)
            if t is None:
                sys.exit("latency_ab: %s printed no result:\n%s" % (label, out[-2000:]))
            times[label].append(t)
    print("%s, %d ranks (%s), %s bytes, %d rounds: us per call; load average %.2f" %
          (args.coll, args.ranks, "threads" if args.threads else "processes", args.bytes,
           args.rounds, os.getloadavg()[0]))
    for label, v in times.items():
        print("  %-10s median %.3f  min %.3f  max %.3f   %s" %
              (label, statistics.median(v), min(v), max(v), " ".join("%.2f" % x for x in v)))
    base = runs[0][0]
    for label, v in list(times.items())[1:]:
        pairs = [(a, b) for a, b in zip(times[base], v) if a != b]
        wins = sum(b < a for a, b in pairs)
        print("  %s against %s: %.2fx the median time; faster in %d of %d rounds (sign test "
              "p = %.2f)" % (label, base, statistics.median(v) / statistics.median(times[base]),
                             wins, len(pairs), sign_test(wins, len(pairs))))


if __name__ == "__main__":
    main()
