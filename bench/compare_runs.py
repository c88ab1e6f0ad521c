#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/compare_runs.py: two bench/compare runs (before and after a change) side by side.

Reads the results.json of each run and prints, per collective, rank count and size, the
after/before ratio of every column's time. The peers' columns (MPI, Gloo) did not change
between the runs, so their ratios are the run-to-run noise of this machine; a Braid column
is reported as worse only where its ratio is beyond the noise the peers showed at that
size class (the largest peer deviation at sizes below 1 MiB, and at 1 MiB and above).

  bench/compare_runs.py /tmp/compare-before /tmp/compare-after
"""
import json
import os
import sys

BRAID = ["braid-shm", "braid-socket", "braid-ofi"]
PEERS = ["mpi-vader", "mpi-tcp", "gloo"]
MiB = 1 << 20


def load(path):
    with open(os.path.join(path, "results.json")) as f:
        data = json.load(f)
    times = {}
    for r in data["results"]:
        times[(r["peer"], r["coll"], r["nranks"], r["size"])] = r["time_us"]
    return data, times


def human(size):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return "%d %s" % (size >> shift, unit)
    return "%d B" % size


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    bdata, before = load(sys.argv[1])
    adata, after = load(sys.argv[2])
    print("before: %s, commit %s, load %.2f -> %.2f" % (
        bdata["meta"]["date"], bdata["meta"].get("braid_commit"),
        bdata["limits"]["loadavg_before"], bdata["limits"]["loadavg_after"]))
    print("after:  %s, commit %s, load %.2f -> %.2f" % (
        adata["meta"]["date"], adata["meta"].get("braid_commit"),
        adata["limits"]["loadavg_before"], adata["limits"]["loadavg_after"]))
    keys = sorted(k for k in before if k in after)
    # Noise: how far the unchanged peers moved, per size class (small, large).
    noise = {True: 1.0, False: 1.0}
    for peer, coll, n, size in keys:
        if peer in PEERS and before[(peer, coll, n, size)] > 0:
            r = after[(peer, coll, n, size)] / before[(peer, coll, n, size)]
            dev = max(r, 1.0 / r)
            noise[size >= MiB] = max(noise[size >= MiB], dev)
    print("run-to-run noise (largest change of an unchanged peer): %.2fx below 1 MiB, %.2fx "
          "from 1 MiB" % (noise[False], noise[True]))
    cols = [c for c in BRAID + PEERS if any(k[0] == c for k in keys)]
    worse = []
    for coll in sorted({k[1] for k in keys}):
        for n in sorted({k[2] for k in keys if k[1] == coll}):
            print("\n== %s, %d ranks: time after / time before (below 1: faster)" % (coll, n))
            print("%10s | " % "size" + " | ".join("%11s" % c for c in cols))
            for size in sorted({k[3] for k in keys if k[1] == coll and k[2] == n}):
                cells = []
                for c in cols:
                    k = (c, coll, n, size)
                    if k not in before or k not in after or before[k] <= 0:
                        cells.append("%11s" % "-")
                        continue
                    r = after[k] / before[k]
                    mark = ""
                    if c in BRAID and r > noise[size >= MiB]:
                        mark = "!"
                        worse.append((coll, n, size, c, r))
                    cells.append("%10.2fx%s" % (r, mark) if mark else "%10.2fx " % r)
                print("%10s | " % human(size) + " | ".join(cells))
    print("\nBraid cells slower by more than the noise: %d" % len(worse))
    for coll, n, size, c, r in worse:
        print("  %s %d ranks %s %s: %.2fx" % (coll, n, human(size), c, r))


if __name__ == "__main__":
    main()
