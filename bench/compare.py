#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/compare: Braid against Open MPI and Gloo on this machine, in one run.

Builds Braid (braid-perf and its net plugins) and three small programs beside it
(bench/mpi_bench.c, bench/gloo_bench.cc, bench/membw.c), measures the machine's limits
(iperf3 over loopback, one core's memcpy and float-sum bandwidth), then times allreduce,
allgather and broadcast at each rank count and size with:

  Braid shm     braid-perf -N n                       (shared-memory transport)
  Braid socket  braid-perf -N n, NCCL_NET_PLUGIN=socket, shm and p2p disabled
  Braid ofi     braid-perf -N n, NCCL_NET_PLUGIN=ofi FI_PROVIDER=tcp (if built)
  MPI vader     mpirun --mca pml ob1 --mca btl self,vader  mpi_bench
  MPI tcp       mpirun --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo
  Gloo          gloo_bench (ring allreduce, TCP transport on loopback)

Every tool times the same way (warm-up, barrier, n calls back to back, mean per call,
maximum over ranks), uses nccl-tests' sizes and busbw formulas, and checks results with
fresh inputs; a peer with wrong results is named. Prints busbw tables with the
Braid/peer ratios, flags every cell that misses its target, and writes results.csv,
results.json and busbw.png into the output directory.
"""
import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.join(REPO, "bench")
KiB, MiB = 1024, 1024 * 1024

COLLS = ["allreduce", "allgather", "broadcast"]
# Allreduce sums floats (as MPI_Allreduce float sum); the copies move bytes, so that 8 B
# stays 8 B even when split over 4 ranks.
DTYPE = {"allreduce": "float", "allgather": "uint8", "broadcast": "uint8"}
PEERS = [
    ("braid-shm", "Braid shm"),
    ("braid-socket", "Braid sock"),
    ("braid-ofi", "Braid ofi"),
    ("mpi-vader", "MPI vader"),
    ("mpi-tcp", "MPI tcp"),
    ("gloo", "Gloo"),
]
# (Braid, peer, target busbw ratio at >= 1 MiB): same transport class for MPI; Gloo runs
# over TCP, so Braid's socket transport is the like-for-like comparison.
RATIOS = [
    ("braid-socket", "mpi-tcp", 1.2, "sock/tcp"),
    ("braid-shm", "mpi-vader", 1.2, "shm/vader"),
    ("braid-socket", "gloo", 1.5, "sock/Gloo"),
    ("braid-shm", "gloo", None, "shm/Gloo"),
]
LATENCY_PAIRS = [("braid-shm", "mpi-vader"), ("braid-socket", "mpi-tcp"),
                 ("braid-ofi", "mpi-tcp")]
TARGET_MIN_SIZE = 1 * MiB

# Size segments: (first, last, factor, iterations, warm-up). Iterations shrink as sizes
# grow so the whole run stays within minutes on two cores; 8 B gets many for latency.
# The target sizes (1-64 MiB) and 8 B run long enough to time the steady state: 20
# calls of 1 MiB over shared memory last 2-4 ms, as long as one start-up hiccup (a
# page fault storm, a rank not yet in its loop), which decided such cells in earlier runs.
FULL = [(8, 8, 2, 5000, 200), (64, 256 * KiB, 8, 100, 5), (1 * MiB, 4 * MiB, 4, 100, 5),
        (16 * MiB, 64 * MiB, 4, 10, 2), (256 * MiB, 256 * MiB, 2, 2, 1)]
QUICK = [(8, 8, 2, 200, 10), (512, 32 * KiB, 8, 20, 2), (1 * MiB, 1 * MiB, 2, 5, 1)]


def log(msg):
    print(msg, flush=True)


def parse_size(text):
    """Bytes from '4M', '256K', '1G' or a plain number."""
    mult = {"K": KiB, "M": MiB, "G": 1 << 30}
    t = text.upper()
    return int(float(t[:-1]) * mult[t[-1]]) if t[-1] in mult else int(t)


def human(size):
    for unit, div in (("GiB", 1 << 30), ("MiB", MiB), ("KiB", KiB)):
        if size >= div and size % div == 0:
            return "%d %s" % (size // div, unit)
    return "%d B" % size


def run(cmd, env=None, timeout=None, cwd=None):
    """Runs a command; returns (rc, stdout, stderr). rc -1 means it timed out."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(cmd, env=full_env, cwd=cwd, timeout=timeout,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        return -1, out, "timed out after %ss" % timeout
    except OSError as e:
        return -2, "", str(e)


def tail(text, lines=3):
    return " | ".join(t for t in text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------------------
# Building


class Build:
    def __init__(self, build_dir, skip):
        self.dir = build_dir
        self.bin = os.path.join(build_dir, "bin")
        self.lib = os.path.join(build_dir, "lib")
        self.peer_dir = os.path.join(build_dir, "bench")
        self.skip = skip
        self.log_path = os.path.join(build_dir, "compare-build.log")
        self.missing = {}  # tool -> reason

    def _log(self, title, rc, out, err):
        with open(self.log_path, "a") as f:
            f.write("== %s (rc %s)\n%s\n%s\n" % (title, rc, out, err))

    def braid(self):
        perf = os.path.join(self.bin, "braid-perf")
        if self.skip:
            if not os.path.exists(perf):
                self.missing["braid"] = "--skip-build but %s does not exist" % perf
            return
        jobs = str(os.cpu_count() or 2)
        rc, out, err = run(["cmake", "-S", REPO, "-B", self.dir, "-DCMAKE_BUILD_TYPE=Release",
                            "-DBRAID_TESTS=OFF", "-DBRAID_CUDA=OFF"])
        self._log("cmake configure", rc, out, err)
        if rc != 0:
            self.missing["braid"] = "cmake failed: " + tail(err)
            return
        rc, out, err = run(["cmake", "--build", self.dir, "--target", "help"])
        targets = ["braid-perf", "nccl-net-socket"]
        if "nccl-net-ofi" in out:
            targets.append("nccl-net-ofi")
        rc, out, err = run(["cmake", "--build", self.dir, "-j", jobs, "--target"] + targets)
        self._log("cmake build " + " ".join(targets), rc, out, err)
        if rc != 0:
            self.missing["braid"] = "build failed: " + tail(err or out)

    def peers(self):
        os.makedirs(self.peer_dir, exist_ok=True)
        jobs = [
            ("mpi", "mpicc", ["mpicc", "-O3", "-std=c11", "-Wall", "-Wextra", "-o",
                              os.path.join(self.peer_dir, "mpi_bench"),
                              os.path.join(HERE, "mpi_bench.c")]),
            ("gloo", "g++", ["g++", "-O3", "-std=c++17", "-Wall", "-Wextra", "-o",
                             os.path.join(self.peer_dir, "gloo_bench"),
                             os.path.join(HERE, "gloo_bench.cc"), "-lgloo", "-pthread"]),
            ("membw", "gcc", ["gcc", "-O3", "-std=c11", "-Wall", "-Wextra", "-o",
                              os.path.join(self.peer_dir, "membw"),
                              os.path.join(HERE, "membw.c")]),
        ]
        for name, compiler, cmd in jobs:
            if shutil.which(compiler) is None:
                self.missing[name] = "%s not found" % compiler
                continue
            if name == "gloo" and not os.path.exists("/usr/include/gloo/allreduce.h"):
                self.missing[name] = "gloo headers not found (libgloo-dev)"
                continue
            rc, out, err = run(cmd)
            self._log("compile " + name, rc, out, err)
            if rc != 0:
                self.missing[name] = "compile failed: " + tail(err)
        if shutil.which("mpirun") is None:
            self.missing.setdefault("mpi", "mpirun not found")

    def tool(self, name):
        if name == "braid-perf":
            return os.path.join(self.bin, "braid-perf")
        return os.path.join(self.peer_dir, name)


# ---------------------------------------------------------------------------------------
# Measuring


def busbw_factor(coll, n):
    """nccl-tests' bus bandwidth factors."""
    return {"allreduce": 2.0 * (n - 1) / n, "allgather": (n - 1) / n}.get(coll, 1.0)


def parse_rows(text):
    """Rows of braid-perf (13 columns, out-of-place first) or of the peers (9 columns)."""
    rows = []
    for line in text.splitlines():
        f = line.split()
        if not f or line.startswith("#") or len(f) not in (9, 13):
            continue
        try:
            wrong = -1 if f[8] == "N/A" else int(f[8])
            rows.append({"size": int(f[0]), "count": int(f[1]), "time_us": float(f[5]),
                         "algbw": float(f[6]), "busbw": float(f[7]), "wrong": wrong})
        except ValueError:
            continue
    return rows


class Bench:
    def __init__(self, args, build):
        self.args = args
        self.build = build
        self.results = {}   # (peer, coll, n, size) -> row
        self.status = {}    # peer -> list of problems ("skipped: ..." first if skipped)
        self.skipped = {}   # peer -> reason
        self.evidence = {}  # peer -> transport lines from an NCCL_DEBUG=INFO probe
        self.segments = QUICK if args.quick else FULL
        self.segments = [(lo, min(hi, args.max_size)) + tuple(rest)
                         for lo, hi, *rest in self.segments if lo <= args.max_size]
        self.runs = []

    # Environment of each Braid transport.
    def braid_env(self, peer):
        env = {"NCCL_SOCKET_IFNAME": "lo", "NCCL_DEBUG": "WARN",
               "LD_LIBRARY_PATH": self.build.lib + ":" + os.environ.get("LD_LIBRARY_PATH", ""),
               "BRAID_PLUGIN_PATH": self.build.lib}
        if peer in ("braid-socket", "braid-ofi"):
            env.update({"NCCL_SHM_DISABLE": "1", "NCCL_P2P_DISABLE": "1",
                        "NCCL_NET_PLUGIN": "socket" if peer == "braid-socket" else "ofi"})
        if peer == "braid-ofi":
            env.update({"FI_PROVIDER": "tcp", "FI_TCP_IFACE": "lo"})
        return env

    def command(self, peer, coll, n, seg):
        lo, hi, factor, iters, warm = seg
        common = ["-b", str(lo), "-e", str(hi), "-f", str(factor), "-n", str(iters),
                  "-w", str(warm), "-c", "1"]
        if peer.startswith("braid"):
            # Out-of-place only: the peers' calls are out of place (MPI_Bcast aside).
            return ([self.build.tool("braid-perf"), "-C", coll, "-N", str(n), "-d", DTYPE[coll],
                     "--place", "out", "-T", str(self.args.timeout)] + common,
                    self.braid_env(peer))
        if peer.startswith("mpi"):
            btl = (["--mca", "btl", "self,vader"] if peer == "mpi-vader" else
                   ["--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo"])
            return (["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n),
                     "--bind-to", "none", "--mca", "pml", "ob1"] + btl +
                    [self.build.tool("mpi_bench"), "-C", coll] + common, {})
        return ([self.build.tool("gloo_bench"), "-N", str(n), "-C", coll] + common, {})

    def availability(self):
        m = self.build.missing
        for peer, _ in PEERS:
            if peer.startswith("braid") and "braid" in m:
                self.skipped[peer] = m["braid"]
            elif peer.startswith("mpi") and "mpi" in m:
                self.skipped[peer] = m["mpi"]
            elif peer == "gloo" and "gloo" in m:
                self.skipped[peer] = m["gloo"]
        ofi = os.path.join(self.build.lib, "libnccl-net-ofi.so")
        if "braid-ofi" not in self.skipped and not os.path.exists(ofi):
            self.skipped["braid-ofi"] = "libnccl-net-ofi.so was not built (needs libfabric-dev)"
        sock = os.path.join(self.build.lib, "libnccl-net-socket.so")
        if "braid-socket" not in self.skipped and not os.path.exists(sock):
            self.skipped["braid-socket"] = "libnccl-net-socket.so was not built"
        for peer, _ in PEERS:
            if peer not in self.args.peers:
                self.skipped.setdefault(peer, "not selected (--peers)")

    def probe(self, peer):
        """Runs 2 ranks once with NCCL_DEBUG=INFO and keeps the lines naming transports."""
        cmd, env = self.command(peer, "allreduce", 2, (8, 8, 2, 1, 0))
        env = dict(env, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET")
        rc, out, err = run(cmd, env=env, timeout=120)
        keep = [l.strip() for l in (out + err).splitlines()
                if "NCCL INFO" in l and any(k in l for k in ("Using network", " via "))]
        keep.sort(key=lambda l: " via " not in l)  # the per-peer transport lines first
        self.evidence[peer] = keep[:8]
        if rc != 0:
            return "probe run failed (rc %d): %s" % (rc, tail(err))
        return None

    def measure(self):
        active = []
        for peer, label in PEERS:
            if peer in self.skipped:
                log("%-12s skipped: %s" % (label, self.skipped[peer]))
                continue
            problem = self.probe(peer) if peer.startswith("braid") else None
            if problem:
                self.skipped[peer] = problem
                log("%-12s skipped: %s" % (label, problem))
                continue
            active.append((peer, label))
        # Each round measures every peer once; later rounds keep the best time per size,
        # so a burst of background load in one round does not decide a comparison. The
        # peers run back to back for each segment, so the ratios compare measurements
        # taken minutes apart at most, under the same background load.
        for rnd in range(self.args.repeat):
            segs = self.segments
            t0 = time.time()
            for coll in self.args.colls:
                for n in self.args.ranks:
                    for seg in segs:
                        for peer, _ in active:
                            self.measure_one(peer, coll, n, seg)
                    log("round %d: %s at %d ranks measured (%.0f s so far)" %
                        (rnd + 1, coll, n, time.time() - t0))

    def measure_one(self, peer, coll, n, seg):
        cmd, env = self.command(peer, coll, n, seg)
        t0 = time.time()
        rc, out, err = run(cmd, env=env, timeout=self.args.timeout + 30)
        rows = parse_rows(out)
        for row in rows:
            # Recomputed from time and size: the printed columns are rounded to 0.01.
            row["algbw"] = row["size"] / row["time_us"] / 1e3 if row["time_us"] > 0 else 0.0
            row["busbw"] = row["algbw"] * busbw_factor(coll, n)
        self.runs.append({"peer": peer, "coll": coll, "nranks": n, "segment": seg[:2], "rc": rc,
                          "seconds": round(time.time() - t0, 2), "cmd": " ".join(cmd)})
        for row in rows:
            key = (peer, coll, n, row["size"])
            old = self.results.get(key)
            if old is None or (0 < row["time_us"] < old["time_us"]):
                self.results[key] = row
            if row["wrong"] > 0:
                self.status.setdefault(peer, []).append(
                    "%s n=%d %s: %d wrong elements" % (coll, n, human(row["size"]), row["wrong"]))
        if rc not in (0, 1) or (rc == 1 and not any(r["wrong"] > 0 for r in rows)):
            self.status.setdefault(peer, []).append(
                "%s n=%d %s..%s: exit %d: %s" % (coll, n, human(seg[0]), human(seg[1]), rc,
                                                 tail(err)))

    # Machine limits.
    def limits(self):
        lim = {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu": cpu_model()}
        membw = self.build.tool("membw")
        if "membw" in self.build.missing:
            lim["membw"] = "skipped: " + self.build.missing["membw"]
        else:
            rc, out, err = run([membw, str(256 * MiB), "5"], timeout=300)
            for line in out.splitlines():
                f = line.split()
                if f and f[0] in ("memcpy_GBps", "sum_GBps"):
                    lim[f[0]] = float(f[1])
        lim["iperf3_GBps"] = iperf3()
        lim["loadavg_before"] = loadavg()
        return lim


def loadavg():
    """The 1-minute load average: other work on the machine skews every column."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def wait_quiet(limit, wait_s):
    """Wait until the 1-minute load average is under `limit` (0: do not wait), for at
    most wait_s seconds; returns the load average the measurement starts at. The build
    and the peers' compilation just before are what usually keeps it up."""
    load = loadavg()
    if not limit or load is None or load < limit:
        return load
    log("waiting for the load average (%.2f) to fall under %.2f (at most %d s)" %
        (load, limit, wait_s))
    deadline = time.time() + wait_s
    while load >= limit and time.time() < deadline:
        time.sleep(5)
        load = loadavg()
    if load >= limit:
        log("warning: the load average is still %.2f; measuring anyway (it is recorded)" % load)
    return load


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def iperf3():
    """One TCP stream over loopback for 3 s, in GB/s; or a 'skipped: ...' string."""
    if shutil.which("iperf3") is None:
        return "skipped: iperf3 not installed"
    port = str(free_port())
    server = subprocess.Popen(["iperf3", "-s", "-1", "-p", port], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(50):  # wait for the server to listen
            rc, out, err = run(["iperf3", "-c", "127.0.0.1", "-p", port, "-t", "3", "-P", "1",
                                "-J"], timeout=30)
            if rc == 0:
                data = json.loads(out)
                if "error" not in data and "sum_received" in data.get("end", {}):
                    return data["end"]["sum_received"]["bits_per_second"] / 8e9
            time.sleep(0.2)  # the server may not be listening yet
        return "skipped: iperf3 client failed: " + tail(err or out)
    except (ValueError, KeyError) as e:
        return "skipped: unreadable iperf3 output (%s)" % e
    finally:
        server.kill()
        server.wait()


# ---------------------------------------------------------------------------------------
# Reporting


def cell(bench, peer, coll, n, size, key="busbw"):
    if peer in bench.skipped:
        return None, "skip"
    row = bench.results.get((peer, coll, n, size))
    if row is None:
        return None, "fail"
    return row[key], None


def sizes_of(bench, coll, n):
    return sorted({k[3] for k in bench.results if k[1] == coll and k[2] == n})


def busbw_tables(bench, out):
    misses = []
    for coll in bench.args.colls:
        for n in bench.args.ranks:
            sizes = sizes_of(bench, coll, n)
            if not sizes:
                continue
            out("")
            out("== %s, %d ranks: busbw in GB/s (out of place); ratios are Braid/peer, "
                "'*' misses its target (>= %s)" % (coll, n, human(TARGET_MIN_SIZE)))
            head = "%10s " % "size" + "".join("| %10s " % lab for _, lab in PEERS)
            head += "".join("| %10s " % r[3] for r in RATIOS)
            out(head)
            out("-" * len(head))
            for size in sizes:
                line = "%10s " % human(size)
                for peer, _ in PEERS:
                    v, why = cell(bench, peer, coll, n, size)
                    line += "| %10s " % (why if v is None else "%.3f" % v)
                for a, b, target, name in RATIOS:
                    va, _ = cell(bench, a, coll, n, size)
                    vb, _ = cell(bench, b, coll, n, size)
                    if va is None or vb is None or vb <= 0:
                        line += "| %10s " % "-"
                        continue
                    ratio = va / vb
                    miss = target is not None and size >= TARGET_MIN_SIZE and ratio < target
                    if miss:
                        misses.append({"coll": coll, "nranks": n, "size": size, "pair": name,
                                       "ratio": round(ratio, 3), "target": target})
                    line += "| %9.2fx%s" % (ratio, "*" if miss else " ")
                out(line)
    return misses


def latency_table(bench, out):
    misses = []
    out("")
    out("== 8-byte latency in us (time per call); '*' = Braid slower than Open MPI on the "
        "same transport class")
    head = "%10s %6s " % ("coll", "ranks") + "".join("| %10s " % lab for _, lab in PEERS)
    out(head)
    out("-" * len(head))
    for coll in bench.args.colls:
        for n in bench.args.ranks:
            line = "%10s %6d " % (coll, n)
            times = {}
            for peer, _ in PEERS:
                v, why = cell(bench, peer, coll, n, 8, key="time_us")
                times[peer] = v
                line += "| %10s " % (why if v is None else "%.2f" % v)
            flags = []
            for a, b in LATENCY_PAIRS:
                if times.get(a) is not None and times.get(b) is not None:
                    if times[a] > times[b]:
                        flags.append("%s %.2fx %s" % (a, times[a] / times[b], b))
                        misses.append({"coll": coll, "nranks": n, "size": 8, "pair": a + "/" + b,
                                       "ratio": round(times[a] / times[b], 3), "target": 1.0})
            out(line + ("  * " + "; ".join(flags) if flags else ""))
    return misses


def verification(bench, out):
    out("")
    out("== verification (every peer checks its results with fresh inputs)")
    verdict = {}
    for peer, label in PEERS:
        if peer in bench.skipped:
            verdict[peer] = "skipped: " + bench.skipped[peer]
        elif bench.status.get(peer):
            verdict[peer] = "PROBLEMS: " + "; ".join(bench.status[peer][:6])
        else:
            checked = sum(1 for k in bench.results if k[0] == peer)
            verdict[peer] = "OK (%d sizes checked, 0 wrong)" % checked
        out("%-12s %s" % (label, verdict[peer]))
        for line in bench.evidence.get(peer, [])[:2]:
            # "host:pid:tid [rank] NCCL INFO ..." -> the message only
            out("%-12s   %s" % ("", line.split("NCCL INFO", 1)[-1].strip()))
    return verdict


def plot(bench, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "skipped: matplotlib not installed"
    colls, ranks = bench.args.colls, bench.args.ranks
    fig, axes = plt.subplots(len(colls), len(ranks), figsize=(6 * len(ranks), 4 * len(colls)),
                             squeeze=False)
    styles = {"braid-shm": "C0-o", "braid-socket": "C1-s", "braid-ofi": "C2-^",
              "mpi-vader": "C0--o", "mpi-tcp": "C1--s", "gloo": "C3:d"}
    for i, coll in enumerate(colls):
        for j, n in enumerate(ranks):
            ax = axes[i][j]
            for peer, label in PEERS:
                pts = sorted((k[3], v["busbw"]) for k, v in bench.results.items()
                             if k[0] == peer and k[1] == coll and k[2] == n and v["busbw"] > 0)
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], styles[peer], label=label,
                            markersize=4)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title("%s, %d ranks" % (coll, n))
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel("busbw (GB/s)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle("busbw against size on %s (%d cores)" % (socket.gethostname(), os.cpu_count()))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_files(bench, outdir, limits, misses, verdict):
    os.makedirs(outdir, exist_ok=True)
    csv_path = os.path.join(outdir, "results.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["peer", "coll", "nranks", "size", "count", "time_us", "algbw", "busbw",
                    "wrong"])
        for (peer, coll, n, size), r in sorted(bench.results.items()):
            w.writerow([peer, coll, n, size, r["count"], r["time_us"], r["algbw"], r["busbw"],
                        r["wrong"]])
    meta = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "braid_commit": run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"])[1].strip(),
        "open_mpi": (run(["mpirun", "--version"])[1].splitlines() or ["?"])[0]
        if shutil.which("mpirun") else None,
        "gloo": run(["dpkg-query", "-W", "-f=${Version}", "libgloo-dev"])[1].strip()
        if shutil.which("dpkg-query") else None,
        "segments": bench.segments,
        "ranks": bench.args.ranks,
    }
    doc = {"meta": meta, "limits": limits, "skipped": bench.skipped, "verification": verdict,
           "target_misses": misses, "transport_evidence": bench.evidence, "runs": bench.runs,
           "results": [dict(peer=k[0], coll=k[1], nranks=k[2], **v)
                       for k, v in sorted(bench.results.items())]}
    json_path = os.path.join(outdir, "results.json")
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
    return csv_path, json_path


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=os.path.join(REPO, "build-bench"),
                    help="where Braid and the peers are built (default: build-bench)")
    ap.add_argument("--out", default=None,
                    help="output directory for the table, PNG, CSV and JSON "
                         "(default: BUILD_DIR/compare-results)")
    ap.add_argument("--ranks", default="2,4", help="rank counts (default 2,4)")
    ap.add_argument("--colls", default=",".join(COLLS), help="collectives (default: all three)")
    ap.add_argument("--peers", default=",".join(p for p, _ in PEERS),
                    help="which columns to measure (default: all)")
    ap.add_argument("--max-size", default=str(256 * MiB),
                    help="largest size in bytes, K/M/G suffixes allowed (default 256M)")
    ap.add_argument("--quick", action="store_true",
                    help="a small sweep (8 B to 1 MiB, few iterations) for trying the script")
    ap.add_argument("--skip-build", action="store_true", help="use what BUILD_DIR holds")
    ap.add_argument("--timeout", type=int, default=600, help="seconds allowed per run")
    ap.add_argument("--quiet-load", type=float, default=1.0,
                    help="before measuring, wait until the 1-minute load average is under "
                         "this (default 1.0; 0: do not wait)")
    ap.add_argument("--quiet-wait", type=int, default=600,
                    help="longest wait for --quiet-load in seconds (default 600)")
    ap.add_argument("--repeat", type=int, default=2,
                    help="rounds over every peer; the best time per size is kept (default 2)")
    args = ap.parse_args()
    args.ranks = [int(x) for x in args.ranks.split(",") if x]
    args.colls = [c for c in args.colls.split(",") if c]
    args.peers = [p for p in args.peers.split(",") if p]
    args.max_size = parse_size(args.max_size)
    outdir = args.out or os.path.join(args.build_dir, "compare-results")
    os.makedirs(args.build_dir, exist_ok=True)
    os.makedirs(outdir, exist_ok=True)

    t0 = time.time()
    build = Build(args.build_dir, args.skip_build)
    log("building into %s (log: %s)" % (args.build_dir, build.log_path))
    build.braid()
    build.peers()
    bench = Bench(args, build)
    bench.availability()
    start_load = wait_quiet(args.quiet_load, args.quiet_wait)
    log("measuring the machine's limits")
    limits = bench.limits()
    limits["loadavg_start"] = start_load
    log("measuring: ranks %s, collectives %s, %d size segments" %
        (args.ranks, args.colls, len(bench.segments)))
    bench.measure()
    limits["loadavg_after"] = loadavg()

    lines = []

    def out(s):
        lines.append(s)
        print(s)

    out("")
    out("== machine: %s, %s cores, Linux %s; load average %.2f at the start, %.2f after "
        "the limits' measurement, %.2f after" %
        (limits["cpu"], limits["nproc"], limits["kernel"], limits["loadavg_start"] or 0,
         limits["loadavg_before"] or 0, limits["loadavg_after"] or 0))
    for key, label in (("memcpy_GBps", "memcpy, one core, 256 MiB"),
                       ("sum_GBps", "float sum c=a+b, one core, 256 MiB (output bytes)"),
                       ("iperf3_GBps", "iperf3, one TCP stream over loopback")):
        v = limits.get(key, "skipped")
        out("   %-52s %s" % (label, "%.2f GB/s" % v if isinstance(v, float) else v))
    misses = busbw_tables(bench, out)
    misses += latency_table(bench, out)
    verdict = verification(bench, out)
    out("")
    if misses:
        out("== targets missed: %d cells (details in results.json, 'target_misses')" %
            len(misses))
    else:
        out("== every measured cell meets its target")
    png = plot(bench, os.path.join(outdir, "busbw.png"))
    csv_path, json_path = write_files(bench, outdir, limits, misses, verdict)
    with open(os.path.join(outdir, "table.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    out("plot: %s" % png)
    out("data: %s, %s, %s" % (csv_path, json_path, os.path.join(outdir, "table.txt")))
    out("total time: %.0f s" % (time.time() - t0))
    wrong = any(v.startswith("PROBLEMS") for v in verdict.values())
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
