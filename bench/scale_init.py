#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/scale_init.py: init time and memory of N ranks as processes of this machine.

For each rank count, runs one communicator and one 8-byte AllReduce with braid-perf:

  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT /usr/bin/time -f "%e s, maxrss %M KB" \\
      build/bin/braid-perf -N N -b 8 -e 8 -n 1 -w 0 -c 1 -T 280

and prints the table of docs/performance.md ("Init time and memory per rank at 8, 64
and 256 ranks"): init (the largest "Init COMPLETE (x s)" of the ranks), the whole run,
the RSS of the largest process (GNU time's maxrss: the largest of the waited-for
processes), and shared memory during the run (the peak of Shmem in /proc/meminfo,
sampled every 20 ms, less its value before the run: it counts the segments already
unlinked, which a listing of /dev/shm misses, but also whatever else the machine's
other users allocate meanwhile). The load average (uptime) before each run is printed
with it: figures taken under load should say so.

  bench/scale_init.py [--build build] [--ranks 8,64,256] [--log-dir DIR] [--per-process]

--per-process also reads every braid-perf process's /proc/<pid>/status every 100 ms
and prints, per rank count, the largest VmHWM and the peaks of RssAnon (private memory)
and RssShmem (shared memory mapped) over the processes, their largest and their median.
The reading costs CPU of its own (a file per process per round): take init times from a
run without it.
"""
import argparse
import os
import re
import subprocess
import sys
import threading
import time


def shmem_kib():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("Shmem:"):
                return int(line.split()[1])
    return 0


def load_average():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def perf_status(name):
    """pid -> (VmHWM, RssAnon, RssShmem) in KiB of every process called `name`."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/status" % pid) as f:
                text = f.read()
        except OSError:
            continue
        if not text.startswith("Name:\t%s\n" % name[:15]):
            continue
        vals = dict(re.findall(r"^(VmHWM|RssAnon|RssShmem):\s+([0-9]+) kB", text, re.M))
        if len(vals) == 3:
            out[int(pid)] = (int(vals["VmHWM"]), int(vals["RssAnon"]), int(vals["RssShmem"]))
    return out


class Sampler(threading.Thread):
    """Peak of Shmem while the run lasts, and with per_process each braid-perf process's
    peaks of VmHWM, RssAnon and RssShmem."""

    def __init__(self, per_process=False):
        super().__init__(daemon=True)
        self.peak = shmem_kib()
        self.per_process = per_process
        self.procs = {}
        self.stop = threading.Event()

    def run(self):
        rounds = 0
        while not self.stop.is_set():
            self.peak = max(self.peak, shmem_kib())
            if self.per_process and rounds % 5 == 0:
                for pid, v in perf_status("braid-perf").items():
                    old = self.procs.get(pid, (0, 0, 0))
                    self.procs[pid] = tuple(max(a, b) for a, b in zip(old, v))
            rounds += 1
            time.sleep(0.02)


def run_one(perf, n, log_dir, per_process=False):
    env = dict(os.environ, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT")
    cmd = ["/usr/bin/time", "-f", "%e s, maxrss %M KB", perf, "-N", str(n), "-b", "8", "-e",
           "8", "-n", "1", "-w", "0", "-c", "1", "-T", "280"]
    load = load_average()
    rest = shmem_kib()
    sampler = Sampler(per_process)
    sampler.start()
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, errors="replace")
    sampler.stop.set()
    sampler.join()
    out = proc.stdout
    if log_dir:
        with open(os.path.join(log_dir, "scale-%d.log" % n), "w") as f:
            f.write(out)
    inits = [float(x) for x in re.findall(r"Init COMPLETE \(([0-9.]+) s\)", out)]
    tm = re.search(r"([0-9.]+) s, maxrss ([0-9]+) KB", out)
    if proc.returncode != 0 or len(inits) != n or tm is None:
        sys.stderr.write(out[-3000:])
        sys.exit("braid-perf -N %d failed (exit %d, %d of %d ranks initialised)" %
                 (n, proc.returncode, len(inits), n))
    row = {"n": n, "load": load, "init": max(inits), "whole": float(tm.group(1)),
           "rss_mib": int(tm.group(2)) / 1024.0, "shm_mib": (sampler.peak - rest) / 1024.0}
    if per_process:
        procs = list(sampler.procs.values())
        if procs:
            col = lambda i: sorted(p[i] / 1024.0 for p in procs)
            row["procs"] = (len(procs), col(0)[-1], col(1)[-1], col(1)[len(procs) // 2],
                            col(2)[-1], col(2)[len(procs) // 2])
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--ranks", default="8,64,256")
    ap.add_argument("--log-dir", default="", help="keep each run's INFO log here")
    ap.add_argument("--per-process", action="store_true",
                    help="also sample each process's memory from /proc (costs CPU)")
    args = ap.parse_args()
    perf = os.path.join(args.build, "bin", "braid-perf")
    if not os.access(perf, os.X_OK):
        sys.exit("%s not found: build first" % perf)
    rows = [run_one(perf, int(n), args.log_dir, args.per_process) for n in args.ranks.split(",")]
    print("| ranks | load before | init (slowest rank) | whole run | RSS of the largest "
          "process | shared memory (peak) |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| %d | %s | %.2f s | %.2f s | %.0f MiB | %.0f MiB |" %
              (r["n"], r["load"], r["init"], r["whole"], r["rss_mib"], r["shm_mib"]))

    if args.per_process:
        print()
        print("| ranks | processes sampled | largest VmHWM | private (RssAnon, max / median) | "
              "shared memory mapped (RssShmem, max / median) |")
        print("|---|---|---|---|---|")
        for r in rows:
            if "procs" in r:
                p = r["procs"]
                print("| %d | %d | %.1f MiB | %.1f / %.1f MiB | %.1f / %.1f MiB |" %
                      (r["n"], p[0], p[1], p[2], p[3], p[4], p[5]))


if __name__ == "__main__":
    main()
