# SPDX-License-Identifier: Apache-2.0
"""The "braid" backend's asynchronous work, errors, timeouts and non-contiguous tensors.

Run under torchrun with 2 processes (tests/torch/torch_test.sh 2 test_work.py). Checks:
  - async_op=True returns before the peer has even joined, and wait() then blocks;
  - calls of one group complete in issue order; two groups do not wait on each other;
  - a Work's Future carries the output tensors (what DDP's comm hooks read);
  - non-contiguous inputs and outputs (transposed, a column, a list of transposes);
  - both ranks isend then irecv (not batched), small and large: no deadlock;
  - bad arguments raise ValueError at the call, with the reason;
  - a call the ranks disagree on raises RuntimeError on wait() carrying Braid's text;
  - a call that outlives the group's timeout raises "Timed out", later calls on the group
    fail at once, destroy_process_group works, and the other groups carry on;
  - destroying a group with work still queued runs that work first.
Prints one line per failed check; exits 1 on any failure.
"""
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)

failures = []


def check(name, ok, detail=""):
    if not ok:
        failures.append(name)
        print(f"rank {dist.get_rank()}: FAIL {name} {detail}", flush=True)


def expect_error(name, fn, kind, text):
    try:
        fn()
    except kind as e:
        check(name, text in str(e), f"message: {e}")
        return str(e)
    except Exception as e:  # noqa: BLE001
        check(name, False, f"raised {type(e).__name__}: {e}")
        return str(e)
    check(name, False, "no exception")
    return ""


def overlap(rank, size):
    """The call returns at once; wait() blocks until the late peer has joined. Rank 1
    sends the time it joined (same host, same clock), so no margin is guessed."""
    x = torch.zeros(1 << 16, dtype=torch.float64)
    if rank == 1:
        time.sleep(1.0)
        x[0] = time.time()
    work = dist.all_reduce(x, async_op=True)
    issued = time.time()
    done_early = work.is_completed()
    work.wait()
    waited = time.time()
    joined = x[0].item()
    if rank == 0:
        check("async call returns before the peer joins", issued < joined,
              f"returned {issued - joined:.3f} s after")
        check("async work not complete before the peer joins", not done_early)
        check("wait blocks until the peer joins", waited >= joined,
              f"returned {joined - waited:.3f} s before")
    check("async all_reduce result", bool((x[1:] == 0).all()) and joined > 0)

    # The Future holds the outputs, and callbacks chain on it as DDP's do.
    y = torch.ones(5)
    fut = dist.all_reduce(y, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    check("future value and callback", torch.equal(doubled, torch.full((5,), 4.0)))


def ordering(rank, size):
    """Queued calls run in issue order: broadcast, then two sums."""
    t = torch.full((3,), 1.0 if rank == 0 else 7.0)
    works = [dist.broadcast(t, 0, async_op=True), dist.all_reduce(t, async_op=True),
             dist.all_reduce(t, async_op=True)]
    for w in works:
        w.wait()
    check("issue order", torch.equal(t, torch.full((3,), float(size * size))), f"{t}")

    # One communication thread per group: opposite orders on two groups complete.
    g1, g2 = dist.new_group([0, 1]), dist.new_group([0, 1])
    a, b = torch.ones(4), torch.ones(4)
    order = [(g1, a), (g2, b)] if rank == 0 else [(g2, b), (g1, a)]
    works = [dist.all_reduce(t, group=g, async_op=True) for g, t in order]
    for w in works:
        w.wait()
    check("two groups in opposite orders", torch.equal(a, b) and a[0].item() == 2.0)
    dist.destroy_process_group(g1)
    dist.destroy_process_group(g2)


def non_contiguous(rank, size):
    x = torch.arange(12, dtype=torch.float32).view(3, 4).t()  # 4 x 3, transposed
    dist.all_reduce(x)
    want = 2 * torch.arange(12, dtype=torch.float32).view(3, 4).t()
    check("all_reduce transposed", torch.equal(x, want) and not x.is_contiguous())

    buf = torch.zeros(4, 4)
    col = buf[:, 1]
    if rank == 0:
        col.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    dist.broadcast(col, 0)
    want = torch.zeros(4, 4)
    want[:, 1] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    check("broadcast into a column", torch.equal(buf, want))

    mine = torch.arange(6, dtype=torch.int64).view(2, 3).t() + 10 * rank
    outs = [torch.zeros(2, 3, dtype=torch.int64).t() for _ in range(2)]
    dist.all_gather(outs, mine)
    ok = all(torch.equal(outs[p], torch.arange(6).view(2, 3).t() + 10 * p) for p in range(2))
    check("all_gather with transposed input and outputs", ok)

    got = torch.zeros(3, 2).t()
    if rank == 0:
        dist.send(torch.arange(6, dtype=torch.float32).view(3, 2)[:, 0], 1)
        dist.recv(got[0], 1)
        check("recv into a row of a transpose", torch.equal(got[0], torch.tensor([5.0, 6.0, 7.0])))
    else:
        x = torch.zeros(3)
        dist.recv(x, 0)
        check("send a column", torch.equal(x, torch.tensor([0.0, 2.0, 4.0])))
        dist.send(torch.tensor([5.0, 6.0, 7.0]), 0)


def exchange(rank, size):
    """Both ranks send first: held back until the wait, the pair goes to Braid as a group."""
    peer = 1 - rank
    for n in (4, 1 << 20):
        mine, got = torch.full((n,), float(rank)), torch.empty(n)
        a = dist.isend(mine, peer)
        b = dist.irecv(got, peer)
        a.wait()
        b.wait()
        check(f"isend then irecv on both ranks, {n} floats", torch.equal(got, torch.full((n,), float(peer))))
    # Polling is_completed() also starts them.
    got = torch.empty(8)
    works = [dist.isend(torch.full((8,), float(rank)), peer), dist.irecv(got, peer)]
    deadline = time.monotonic() + 30
    while not all(w.is_completed() for w in works) and time.monotonic() < deadline:
        time.sleep(0.001)
    check("is_completed polling starts held sends", torch.equal(got, torch.full((8,), float(peer))))


def errors(rank, size):
    expect_error("int16 refused", lambda: dist.all_reduce(torch.ones(2, dtype=torch.int16)),
                 ValueError, "torch.int16 have no Braid")
    expect_error("BAND refused", lambda: dist.all_reduce(
        torch.ones(2, dtype=torch.int32), op=dist.ReduceOp.BAND), ValueError, "no Braid equivalent")
    expect_error("wrong list length", lambda: dist.all_gather([torch.ones(2)], torch.ones(2)),
                 ValueError, "one per rank")
    sparse = torch.sparse_coo_tensor([[0, 2]], [1.0, 2.0], (4,))
    expect_error("sparse MAX refused", lambda: dist.all_reduce(sparse, op=dist.ReduceOp.MAX),
                 ValueError, "summed only")

    # The ranks disagree on the size: Braid fails the call on both, saying so.
    g = dist.new_group([0, 1])
    work = dist.all_reduce(torch.ones(4 if rank == 0 else 8), group=g, async_op=True)
    msg = expect_error("mismatched call raises on wait", work.wait, RuntimeError,
                       "braid:all_reduce failed")
    check("the message carries Braid's text", "rank" in msg and "count" in msg, msg)
    dist.destroy_process_group(g)


def timeout(rank, size):
    """Rank 1 never joins: rank 0's call times out, and the group can still be destroyed."""
    g = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    if rank == 0:
        start = time.monotonic()
        expect_error("timed out", lambda: dist.all_reduce(torch.ones(3), group=g),
                     RuntimeError, "Timed out after 2000 ms")
        took = time.monotonic() - start
        check("timeout honoured", 1.9 < took < 10, f"took {took:.2f} s")
        start = time.monotonic()
        expect_error("later calls fail at once", lambda: dist.all_reduce(torch.ones(3), group=g),
                     RuntimeError, "timed out earlier")
        check("at once", time.monotonic() - start < 1.0)
    dist.destroy_process_group(g)
    # The world group is untouched.
    t = torch.ones(2)
    dist.all_reduce(t)
    check("world group after a timeout elsewhere", torch.equal(t, torch.full((2,), 2.0)))


def destroy_with_work_queued(rank, size):
    g = dist.new_group([0, 1])
    t = torch.ones(1 << 12)
    work = dist.all_reduce(t, group=g, async_op=True)
    dist.destroy_process_group(g)  # the destructor runs what is queued first
    work.wait()
    check("work queued at destroy completes", torch.equal(t, torch.full((1 << 12,), 2.0)))


def main():
    dist.init_process_group("braid", timeout=timedelta(seconds=60))
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 2, "run with 2 processes"
    for step in (overlap, ordering, non_contiguous, exchange, errors, timeout,
                 destroy_with_work_queued):
        step(rank, size)
        dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: {len(failures)} failed", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
