#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/cpu_split.py: where the CPU time of one collective goes, Braid next to its peers.

bench/compare says which library is faster in a cell; this says why. It runs one cell
(collective, rank count, size) for each peer with the same command bench/compare uses,
under `perf record -a` (every CPU, so idle time, the kernel's socket copies and other
processes' work are all counted), and splits the samples into what bounds a host
collective:

  kernel copy   the kernel copying user data: socket send and receive (_copy_from_iter,
                _copy_to_iter), process_vm_readv/writev, page copies
  user copy     memcpy / memmove in user space (FIFO slots, arena, in-to-out copies)
  reduce        arithmetic (Braid's br_reduce, Open MPI's ompi_op_*, Gloo's sum)
  net stack     the rest of the kernel's network path (TCP, skb, softirq, socket calls)
  waiting       scheduling and waits: sched_yield, context switches, poll/epoll, futex,
                spin-wait hints, nanosleep
  idle          a CPU with nothing to run
  other         everything else (the libraries' own code, process start-up)

and reports each as CPU milliseconds per GB the collective moved (the algorithm's bytes:
size x iterations), next to the busbw the same run measured; below 64 KiB, as CPU
microseconds per call next to the time per call. Each peer runs twice, with all the
calls and with a quarter of them, and the figures are the difference: start-up (mpirun,
first touch of the buffers) cancels out. On a CPU-bound cell the columns of a peer add
up to about (number of CPUs) x 1000 / busbw. Two libraries that make the
same copies should show the same kernel-copy and user-copy cost per GB; where they do
not, the copies themselves differ (cache state, size per system call) and the table says
by how much. Needs `perf` (linux-perf) and bench/compare's build (`--skip-build` there,
or run bench/compare once first).

    bench/cpu_split.py --coll broadcast --ranks 2 --size 4M \\
        --peers braid-socket,mpi-tcp --iters 400
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402  (the peers' commands and the output parser)

CATEGORIES = ["kernel copy", "user copy", "reduce", "net stack", "waiting", "idle", "other",
              "not ours"]
# The benchmark's processes and threads (Braid names its threads braid-*; mpirun's ranks
# are mpi_bench, with orted and mpirun beside them), the kernel's softirq threads that
# carry loopback traffic, and idle CPUs: everything else is another process's work.
SMALL = 64 * 1024  # below this, figures are per call rather than per GB
OURS = re.compile(r"^(braid|mpi|orted|gloo|swapper|ksoftirqd)")

# (category, kernel symbol?, pattern); the first match wins.
RULES = [
    ("idle", True, re.compile(r"safe_halt|default_idle|cpuidle|intel_idle|acpi_idle|"
                              r"mwait_idle|do_idle|cpu_startup_entry|poll_idle")),
    ("kernel copy", True, re.compile(r"copy_from_iter|copy_to_iter|copy_user|"
                                     r"rep_movs|copy_page|process_vm_rw|memcpy_orig|"
                                     r"copyin|copyout|__memcpy|__memmove")),
    ("waiting", True, re.compile(r"sched|switch|yield|futex|poll|epoll|select|"
                                 r"nanosleep|hrtimer|pick_next|enqueue|dequeue|"
                                 r"update_curr|update_load|try_to_wake|rseq")),
    ("net stack", True, re.compile(r".")),
    ("user copy", False, re.compile(r"memmove|memcpy|memset")),
    ("reduce", False, re.compile(r"br_reduce|reduce_|kv_|ompi_op|mca_op|gloo.*sum|"
                                 r"gloo.*reduce|avx.*sum")),
    ("waiting", False, re.compile(r"sched_yield|nap$|__poll|epoll_wait|pthread_cond|"
                                  r"futex|nanosleep|usleep|clock_nanosleep|"
                                  r"opal_progress|event_base_loop")),
    ("other", False, re.compile(r".")),
]


def categorize(sym, kernel):
    for cat, k, pat in RULES:
        if k == kernel and pat.search(sym):
            return cat
    return "other"


def perf_samples(data):
    """({(comm, symbol): (percent, kernel?)}, CPU ns sampled) from perf report on data."""
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "comm,sym",
                          "-g", "none", "--percent-limit", "0.01", "--stdio"],
                         capture_output=True, text=True).stdout
    syms, ns = {}, 0.0
    for line in out.splitlines():
        m = re.match(r"# Event count \(approx\.\):\s*([0-9]+)", line)
        if m:
            ns = float(m.group(1))  # cpu-clock counts nanoseconds
            continue
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[([k.])\]\s+(.*\S)", line)
        if m:
            syms[(m.group(2), m.group(4))] = (float(m.group(1)), m.group(3) == "k")
    return syms, ns


def record(bench, peer, coll, n, size, iters, warm, freq):
    """One run under perf: (row of the timed calls, {category: CPU ns}, top symbols), or
    an error string."""
    cmd, env = bench.command(peer, coll, n, (size, size, 2, iters, warm))
    # Timing only: the result check (bench/compare's -c 1) would dominate the profile.
    at = cmd.index("-c")
    cmd[at + 1] = "0"
    full_env = dict(os.environ)
    full_env.update(env)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        p = subprocess.run(["perf", "record", "-e", "cpu-clock", "-a", "-F", str(freq), "-o",
                            data, "--"] + cmd,
                           capture_output=True, text=True, env=full_env)
        rows = compare.parse_rows(p.stdout)
        if p.returncode != 0 or not rows:
            return "exit %d: %s" % (p.returncode, compare.tail(p.stderr or p.stdout))
        syms, cpu_ns = perf_samples(data)
    split = {c: 0.0 for c in CATEGORIES}
    for (comm, sym), (pct, kernel) in syms.items():
        split[categorize(sym, kernel) if OURS.match(comm) else "not ours"] += pct
    total = sum(split.values()) or 1.0
    return (rows[0], {c: split[c] / total * cpu_ns for c in CATEGORIES},
            sorted(syms.items(), key=lambda kv: -kv[1][0])[:8])


def measure(bench, peer, coll, n, size, iters, warm, freq):
    """The timed calls' CPU time by category: a run of `iters` calls less a run of a
    quarter as many, so start-up (mpirun's, the buffers' first touch) cancels out."""
    short = max(1, iters // 4)
    big = record(bench, peer, coll, n, size, iters, warm, freq)
    if isinstance(big, str):
        return {"error": big}
    small = record(bench, peer, coll, n, size, short, warm, freq)
    if isinstance(small, str):
        return {"error": small}
    row, ns, top = big
    calls = iters - short
    diff = {c: ns[c] - small[1][c] for c in CATEGORIES}
    return {"busbw": size / row["time_us"] / 1e3 * compare.busbw_factor(coll, n),
            "time_us": row["time_us"],
            "cpu_ms_per_gb": {c: diff[c] / 1e6 / (size * calls / 1e9) for c in CATEGORIES},
            "cpu_us_per_call": {c: diff[c] / 1e3 / calls for c in CATEGORIES},
            "top": top}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(compare.REPO, "build-bench"))
    ap.add_argument("--coll", default="broadcast", choices=compare.COLLS)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size", default="4M", help="bytes, K/M/G suffixes allowed")
    ap.add_argument("--iters", type=int, default=200, help="timed calls (default 200)")
    ap.add_argument("--warm", type=int, default=5)
    ap.add_argument("--peers", default="braid-socket,mpi-tcp,gloo")
    ap.add_argument("--freq", type=int, default=4000, help="perf samples per second per CPU")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--top", action="store_true", help="also print each run's top symbols")
    args = ap.parse_args()
    if shutil.which("perf") is None:
        print("cpu_split: perf not found (apt-get install linux-perf)", file=sys.stderr)
        return 2
    size = compare.parse_size(args.size)

    class Args:
        timeout = args.timeout
        quick = False
        max_size = size
    build = compare.Build(args.build_dir, True)
    bench = compare.Bench(Args, build)
    print("== %s, %d ranks, %s, %d calls per peer; load average %.2f before" %
          (args.coll, args.ranks, compare.human(size), args.iters, compare.loadavg() or 0))
    per_call = size < SMALL
    print("   %s (all %d CPUs, idle included); %s of the same run" %
          ("CPU us per call" if per_call else "CPU ms per GB moved", os.cpu_count() or 1,
           "us per call" if per_call else "busbw"))
    hdr = "%-13s %8s" % ("peer", "us/call" if per_call else "busbw") + "".join(
        " %11s" % c for c in CATEGORIES)
    print(hdr)
    for peer in [p for p in args.peers.split(",") if p]:
        r = measure(bench, peer, args.coll, args.ranks, size, args.iters, args.warm, args.freq)
        if "error" in r:
            print("%-13s %s" % (peer, r["error"]))
            continue
        if per_call:
            print("%-13s %8.2f" % (peer, r["time_us"]) +
                  "".join(" %11.2f" % r["cpu_us_per_call"][c] for c in CATEGORIES))
        else:
            print("%-13s %8.3f" % (peer, r["busbw"]) +
                  "".join(" %11.0f" % r["cpu_ms_per_gb"][c] for c in CATEGORIES))
        if args.top:
            for (comm, sym), (pct, kernel) in r["top"]:
                print("      %6.2f%%  %-12s [%s] %s" % (pct, comm, "k" if kernel else ".", sym))
    print("== load average %.2f after" % (compare.loadavg() or 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
