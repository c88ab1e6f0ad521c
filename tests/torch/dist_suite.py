# SPDX-License-Identifier: Apache-2.0
"""PyTorch's own distributed test suite (DistributedTest in
torch/testing/_internal/distributed/distributed_test.py) on the "braid" backend, run as
test/distributed/test_distributed_spawn.py runs it: one unittest process, and for every
test a fresh set of WORLD_SIZE ranks started with multiprocessing's spawn, joined through
a file store.

The suite is PyTorch's, unchanged. What this runner sets up is that the suite treats
"braid" as it treats Gloo, the CPU backend braid stands in for:
  - BACKEND compares (and hashes) equal to "gloo" inside the suite, so that the
    suite's Gloo-only tests and branches (`BACKEND != "gloo"` skips, sparse all_reduce,
    barrier timeouts, batch_isend_irecv on CPU, `require_backend_is_available({"gloo"})`)
    run for braid, while init_process_group still receives "braid";
  - "braid" joins every DistTestCases.backend_feature set that holds "gloo" (and
    "plugin", which tells the suite the backend is available);
  - "braid" joins the suite's lists of backends whose profiler events are checked.

Environment: BACKEND (braid or gloo; default braid), WORLD_SIZE (default 2). Arguments:
    dist_suite.py [--expect FILE] [--record FILE] [--list] [--exclude FILE] [TEST ...]
  TEST ...        run only these tests (names as test_all_reduce_sum); default: all
  --expect FILE   run the tests named in FILE (one a line, '#' comments) and fail if any
                  of them does not pass (skips included)
  --exclude FILE  leave out the tests named in FILE (the documented exceptions)
  --record FILE   write the names of the tests that passed to FILE
  --list          print the suite's test names and exit
Prints one line per test (PASS, SKIP with the reason, FAIL) and a summary.
"""
import collections.abc
import os
import shutil
import sys
import tempfile
import time
import unittest

BACKEND_NAME = os.environ.setdefault("BACKEND", "braid")
os.environ.setdefault("WORLD_SIZE", "2")
# The suite keeps its barriers' files under TEMP_DIR; the ranks inherit it, and the
# process that made it removes it at the end.
OWN_TEMP_DIR = None
if "TEMP_DIR" not in os.environ:
    OWN_TEMP_DIR = os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="braid_dist_suite_")

try:
    import expecttest  # noqa: F401  (PyTorch's test helpers need it; pip install expecttest)
except ImportError:
    print("SKIP: PyTorch's test suite needs expecttest (scripts/install-deps.sh installs it)")
    sys.exit(77)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

AS_GLOO = BACKEND_NAME == "braid"

if AS_GLOO:
    import braid_torch  # noqa: F401,E402  (registers the backend)

    for features in DistTestCases.backend_feature.values():
        if "gloo" in features:
            features.add("braid")
    DistTestCases.backend_feature["plugin"].add("braid")


class _BraidAsGloo(str):
    """The string "braid" that the suite's comparisons take for "gloo" as well."""

    def __eq__(self, other):
        return str.__eq__(self, other) is True or str.__eq__("gloo", other) is True

    def __ne__(self, other):
        return not self.__eq__(other)

    def __hash__(self):
        return hash("gloo")


class _EnvAsGloo(collections.abc.MutableMapping):
    """os.environ, except that BACKEND reads as _BraidAsGloo (only while the suite is
    imported: its module-level BACKEND is read then)."""

    def __init__(self, real):
        self._real = real

    def __getitem__(self, key):
        value = self._real[key]
        return _BraidAsGloo(value) if key == "BACKEND" and value == "braid" else value

    def __setitem__(self, key, value):
        self._real[key] = value

    def __delitem__(self, key):
        del self._real[key]

    def __iter__(self):
        return iter(self._real)

    def __len__(self):
        return len(self._real)

    def copy(self):
        return dict(self._real)


if AS_GLOO:
    _real_environ = os.environ
    os.environ = _EnvAsGloo(_real_environ)
    try:
        from torch.testing._internal.distributed import distributed_test as _suite  # noqa: E402
    finally:
        os.environ = _real_environ
    for _name in ("PROFILING_SUPPORTED_BACKENDS", "CUDA_PROFILING_SUPPORTED_BACKENDS",
                  "SEND_RECV_PROFILING_SUPPORTED_BACKENDS"):
        getattr(_suite, _name).append("braid")
else:
    from torch.testing._internal.distributed import distributed_test as _suite  # noqa: E402

TestDistBackend = _suite.TestDistBackend
DistributedTest = _suite.DistributedTest


START = os.environ.get("BRAID_SUITE_START", "spawn")


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    # As test/distributed/test_distributed_spawn.py; BRAID_SUITE_START=fork starts the
    # ranks by fork instead (as PyTorch's test_distributed_fork.py did), which spares each
    # rank of each test importing torch and the suite again.
    def setUp(self):
        super().setUp()
        if START == "fork":
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def _names_in(path):
    names = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                names.append(line)
    return names


class _Result(unittest.TestResult):
    """Prints one line per test as it ends; keeps the names of those that passed."""

    def __init__(self):
        super().__init__()
        self.passed, self.failed_names, self.skipped_names = [], [], []
        self._start = 0.0

    def startTest(self, test):
        super().startTest(test)
        self._start = time.monotonic()

    def _line(self, test, what):
        name = test.id().rsplit(".", 1)[-1]
        print(f"{what:4} {name} ({time.monotonic() - self._start:.1f} s)", flush=True)
        return name

    def addSuccess(self, test):
        super().addSuccess(test)
        self.passed.append(self._line(test, "PASS"))

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.skipped_names.append(self._line(test, "SKIP"))
        print(f"     {reason}", flush=True)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self.failed_names.append(self._line(test, "FAIL"))
        print(self._exc_info_to_string(err, test), flush=True)

    def addError(self, test, err):
        super().addError(test, err)
        self.failed_names.append(self._line(test, "FAIL"))
        print(self._exc_info_to_string(err, test), flush=True)


def main(argv):
    args = argv[1:]
    expect = record = exclude = None
    listing = False
    names = []
    while args:
        a = args.pop(0)
        if a == "--expect":
            expect = args.pop(0)
        elif a == "--record":
            record = args.pop(0)
        elif a == "--exclude":
            exclude = args.pop(0)
        elif a == "--list":
            listing = True
        else:
            names.append(a)
    everything = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    if listing:
        print("\n".join(everything))
        return 0
    if expect:
        names += _names_in(expect)
    if not names:
        names = list(everything)
    if exclude:
        left_out = set(_names_in(exclude))
        names = [n for n in names if n not in left_out]
    unknown = [n for n in names if n not in everything]
    if unknown:
        print(f"dist_suite.py: not in this PyTorch's suite: {' '.join(unknown)}")
        return 2
    suite = unittest.TestSuite(TestDistBackendWithSpawn(n) for n in names)
    result = _Result()
    start = time.monotonic()
    suite.run(result)
    took = time.monotonic() - start
    print(f"DistributedTest on {BACKEND_NAME}, {os.environ['WORLD_SIZE']} ranks, PyTorch "
          f"{torch.__version__}: {len(result.passed)} passed, "
          f"{len(result.skipped_names)} skipped, {len(result.failed_names)} failed, of "
          f"{len(names)} in {took:.0f} s", flush=True)
    if record:
        with open(record, "w") as f:
            f.write("".join(n + "\n" for n in result.passed))
    if result.failed_names:
        print("failed: " + " ".join(result.failed_names))
    if expect and result.skipped_names:
        print("expected to pass but skipped: " + " ".join(result.skipped_names))
        return 1
    return 1 if result.failed_names else 0


if __name__ == "__main__":
    try:
        rc = main(sys.argv)
    finally:
        if OWN_TEMP_DIR:
            shutil.rmtree(OWN_TEMP_DIR, ignore_errors=True)
    sys.exit(rc)
