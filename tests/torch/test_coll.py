# SPDX-License-Identifier: Apache-2.0
"""Every collective of the "braid" backend x every dtype x every reduce op, checked.

Run under torchrun (tests/torch/torch_test.sh). Each rank builds its inputs from its group
rank with a formula every rank can evaluate, so the expected result of each call is
computed here, in float64 (complex128), from all ranks' inputs, without any collective.
Values stay small integers, so sums, products, minima and maxima are exact in every
dtype; only AVG is compared with a tolerance on floating types.

Groups: the world, and with --subgroups, groups of 1, 2 and 3 ranks made with
new_group, so one launch of 4 processes checks every group size from 1 to 4.
Prints one line per failed check and a summary per rank; exits 1 on any failure.
"""
import argparse
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import braid_torch  # noqa: F401  (registers the backend)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool, torch.complex64]
OPS = ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM"]
EXACT = {torch.int8, torch.uint8, torch.int32, torch.int64, torch.bool}
# (rtol, atol) for AVG, whose 1/n does not round the same way everywhere.
TOL = {torch.float16: (1e-2, 1e-2), torch.bfloat16: (4e-2, 4e-2), torch.float32: (1e-5, 1e-6),
       torch.float64: (1e-12, 1e-12), torch.complex64: (1e-5, 1e-6)}
L = 7  # elements per rank: odd, so no size happens to divide evenly
PREMUL = 2.0


def ideal(seed, n, dtype):
    """The values (float64) a rank with this seed contributes: 1..3, some negated."""
    i = torch.arange(n, dtype=torch.float64)
    if dtype == torch.bool:
        return (seed + i).remainder(2)
    v = (seed + 2 * i).remainder(3) + 1
    if dtype != torch.uint8:
        v = torch.where(i.remainder(4) == 3, -v, v)
    return v


def cast(v, dtype):
    """Ideal float64 values as a tensor of dtype (complex: v + (v+1)i)."""
    if dtype == torch.bool:
        return v != 0
    if dtype.is_complex:
        return torch.complex(v, v + 1).to(dtype)
    return v.to(dtype, copy=True)  # never the ideal tensor itself: calls write in place


def expected(op, dtype, stack, n):
    """The reduction over dim 0 of the ranks' ideal values, as the backend defines it."""
    if dtype == torch.bool:
        op = {"SUM": "MAX", "PRODUCT": "MIN"}.get(op, op)  # logical or / and
    if dtype.is_complex:
        stack = torch.complex(stack, stack + 1)
    if op == "SUM":
        return stack.sum(0)
    if op == "PRODUCT":
        return stack.prod(0)
    if op == "MIN":
        return stack.min(0).values
    if op == "MAX":
        return stack.max(0).values
    if op == "PREMUL_SUM":
        return (PREMUL * stack).sum(0)
    avg = stack.sum(0) / n
    # Integer AVG divides the sum towards zero, as C does.
    return avg.trunc() if dtype in EXACT else avg


def supported(op, dtype):
    if dtype == torch.bool:
        return op not in ("AVG", "PREMUL_SUM")
    if dtype.is_complex:
        return op in ("SUM", "AVG", "PREMUL_SUM")
    return True


def matches(got, want, dtype):
    if dtype in EXACT:
        return torch.equal(got, cast(want, dtype) if dtype == torch.bool else want.to(dtype))
    big = torch.complex128 if dtype.is_complex else torch.float64
    rtol, atol = TOL[dtype]
    return torch.allclose(got.to(big), want.to(big), rtol=rtol, atol=atol)


class Checker:
    def __init__(self, rank):
        self.rank, self.count, self.failed = rank, 0, 0

    def check(self, name, ok, detail=""):
        if not isinstance(ok, bool):  # (got, want, dtype): compare, show both on failure
            got, want, dtype = ok
            ok, detail = matches(got, want, dtype), f"got {got.tolist()} want {want.tolist()}"
        self.count += 1
        if not ok:
            self.failed += 1
            print(f"rank {self.rank}: FAIL {name} {detail}", flush=True)

    def raises(self, name, fn, text):
        """fn must raise an exception whose message contains text."""
        try:
            fn()
        except Exception as e:  # noqa: BLE001 (the message is what is checked)
            self.check(name, text in str(e), f"message: {e}")
            return
        self.check(name, False, "no exception")


def make_op(op, tensor_factor=False):
    if op == "PREMUL_SUM":
        arg = torch.tensor(PREMUL) if tensor_factor else PREMUL
        return dist._make_nccl_premul_sum(arg)
    return getattr(dist.ReduceOp, op)


def reductions(c, g, ranks, r, n, dtype):
    root = n - 1
    for op in OPS:
        tag = f"{dtype} {op} n={n}"
        whole = torch.stack([ideal(p, n * L, dtype) for p in range(n)])
        mine = ideal(r, n * L, dtype)
        if not supported(op, dtype):
            c.raises(f"all_reduce {tag} refused", lambda: dist.all_reduce(
                cast(mine, dtype), op=make_op(op), group=g), "")
            continue
        want = expected(op, dtype, whole, n)
        t = cast(mine, dtype)
        dist.all_reduce(t, op=make_op(op), group=g)
        c.check(f"all_reduce {tag}", matches(t, want, dtype))

        t = cast(mine, dtype)
        dist.reduce(t, ranks[root], op=make_op(op), group=g)
        if r == root:
            c.check(f"reduce {tag}", (t, want, dtype))

        out = torch.empty(L, dtype=dtype)
        dist.reduce_scatter_tensor(out, cast(mine, dtype), op=make_op(op, True), group=g)
        c.check(f"reduce_scatter_tensor {tag}", matches(out, want[r * L:(r + 1) * L], dtype))

        out = torch.empty(L, dtype=dtype)
        dist.reduce_scatter(out, list(cast(mine, dtype).chunk(n)), op=make_op(op), group=g)
        c.check(f"reduce_scatter {tag}", matches(out, want[r * L:(r + 1) * L], dtype))


def block(src, dst, k, dtype):
    """What rank src sends rank dst in the all-to-alls."""
    return cast((src * 3 + dst + torch.arange(k, dtype=torch.float64)).remainder(5), dtype)


def copies(c, g, ranks, r, n, dtype):
    tag = f"{dtype} n={n}"
    mine = cast(ideal(r, L, dtype), dtype)
    of = [cast(ideal(p, L, dtype), dtype) for p in range(n)]
    for root in sorted({0, n - 1}):
        t = mine.clone()
        dist.broadcast(t, ranks[root], group=g)
        c.check(f"broadcast root {root} {tag}", torch.equal(t, of[root]))

    outs = [torch.empty(L, dtype=dtype) for _ in range(n)]
    dist.all_gather(outs, mine, group=g)
    c.check(f"all_gather {tag}", all(torch.equal(a, b) for a, b in zip(outs, of)))

    # Uneven (braidAllGatherV): rank p contributes (p + 1) % 3 elements (rank 2 none).
    sizes = [(p + 1) % 3 for p in range(n)]
    outs = [torch.empty(sizes[p], dtype=dtype) for p in range(n)]
    dist.all_gather(outs, block(r, r, sizes[r], dtype), group=g)
    c.check(f"all_gather uneven {tag}",
            all(torch.equal(outs[p], block(p, p, sizes[p], dtype)) for p in range(n)))

    out = torch.empty(n, L, dtype=dtype)
    dist.all_gather_into_tensor(out, mine, group=g)
    c.check(f"all_gather_into_tensor {tag}", torch.equal(out, torch.stack(of)))

    root = n // 2
    outs = [torch.empty(L, dtype=dtype) for _ in range(n)] if r == root else None
    dist.gather(mine, outs, ranks[root], group=g)
    if r == root:
        c.check(f"gather {tag}", all(torch.equal(a, b) for a, b in zip(outs, of)))

    ins = [cast(ideal(p + 1, L, dtype), dtype) for p in range(n)] if r == 0 else None
    out = torch.empty(L, dtype=dtype)
    dist.scatter(out, ins, ranks[0], group=g)
    c.check(f"scatter {tag}", torch.equal(out, cast(ideal(r + 1, L, dtype), dtype)))

    k = 3
    out = torch.empty(n * k, dtype=dtype)
    dist.all_to_all_single(out, torch.cat([block(r, p, k, dtype) for p in range(n)]), group=g)
    want = torch.cat([block(p, r, k, dtype) for p in range(n)])
    c.check(f"all_to_all_single {tag}", torch.equal(out, want))

    # Uneven: (r + p) % 3 rows of 2 go from r to p.
    rows = [(r + p) % 3 for p in range(n)]
    inp = torch.cat([block(r, p, 2 * rows[p], dtype) for p in range(n)]).view(-1, 2)
    out = torch.empty(sum(rows), 2, dtype=dtype)
    dist.all_to_all_single(out, inp, rows, rows, group=g)
    want = torch.cat([block(p, r, 2 * rows[p], dtype) for p in range(n)]).view(-1, 2)
    c.check(f"all_to_all_single uneven {tag}", torch.equal(out, want))

    outs = [torch.empty(k, dtype=dtype) for _ in range(n)]
    dist.all_to_all(outs, [block(r, p, k, dtype) for p in range(n)], group=g)
    c.check(f"all_to_all {tag}",
            all(torch.equal(outs[p], block(p, r, k, dtype)) for p in range(n)))


def point_to_point(c, g, ranks, r, n, dtype):
    tag = f"{dtype} n={n}"
    nxt, prv = (r + 1) % n, (r - 1) % n
    mine = cast(ideal(r, L, dtype), dtype)
    got = torch.empty(L, dtype=dtype)
    if n > 1:
        # Even ranks send first, odd ones receive first: no cycle of waiting sends.
        if r % 2 == 0:
            dist.send(mine, ranks[nxt], group=g)
            dist.recv(got, ranks[prv], group=g)
        else:
            dist.recv(got, ranks[prv], group=g)
            dist.send(mine, ranks[nxt], group=g)
        c.check(f"send/recv ring {tag}", torch.equal(got, cast(ideal(prv, L, dtype), dtype)))
    # A batch goes to Braid as one group, so everybody may send first (and to itself).
    got = torch.empty(L, dtype=dtype)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, mine, ranks[nxt], g),
                                   dist.P2POp(dist.irecv, got, ranks[prv], g)])
    for q in reqs:
        q.wait()
    c.check(f"batch_isend_irecv ring {tag}", torch.equal(got, cast(ideal(prv, L, dtype), dtype)))


def coalesced_and_refused(c, g, ranks, r, n):
    tag = f"n={n}"
    ts = [cast(ideal(r, m, torch.float32), torch.float32) for m in (3, 5)]
    dist.all_reduce_coalesced(ts, group=g)
    for m, t in zip((3, 5), ts):
        want = torch.stack([ideal(p, m, torch.float32) for p in range(n)]).sum(0).float()
        c.check(f"all_reduce_coalesced {m} {tag}", torch.equal(t, want))
    ins = [cast(ideal(r, m, torch.int64), torch.int64) for m in (2, 4)]
    outs = [[torch.empty(m, dtype=torch.int64) for m in (2, 4)] for _ in range(n)]
    dist.all_gather_coalesced(outs, ins, group=g)
    c.check(f"all_gather_coalesced {tag}", all(
        torch.equal(outs[p][j], cast(ideal(p, m, torch.int64), torch.int64))
        for p in range(n) for j, m in enumerate((2, 4))))

    for op in ("BAND", "BOR", "BXOR"):
        c.raises(f"all_reduce {op} refused {tag}", lambda: dist.all_reduce(
            torch.ones(4, dtype=torch.int32), op=getattr(dist.ReduceOp, op), group=g),
            "no Braid equivalent")
    c.raises(f"int16 refused {tag}", lambda: dist.all_reduce(
        torch.ones(4, dtype=torch.int16), group=g), "torch.int16")
    dist.barrier(group=g)


def run_group(c, g, ranks):
    r, n = dist.get_rank(g), len(ranks)
    start = time.monotonic()
    for dtype in DTYPES:
        reductions(c, g, ranks, r, n, dtype)
        copies(c, g, ranks, r, n, dtype)
        point_to_point(c, g, ranks, r, n, dtype)
    coalesced_and_refused(c, g, ranks, r, n)
    if r == 0:
        print(f"group of {n} {ranks}: {time.monotonic() - start:.2f} s", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--subgroups", action="store_true",
                    help="also check groups of 1, 2 and 3 ranks (needs 4 processes)")
    args = ap.parse_args()
    dist.init_process_group("braid", timeout=timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    c = Checker(rank)
    run_group(c, None, list(range(size)))
    if args.subgroups:
        assert size == 4, "--subgroups needs 4 processes"
        # new_group is called by every rank, member or not.
        for ranks in ([2], [1, 3], [0, 1, 2]):
            g = dist.new_group(ranks, backend="braid")
            if rank in ranks:
                run_group(c, g, ranks)
            dist.destroy_process_group(g)  # returns at once on a non-member
    dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: {c.count} checks, {c.failed} failed", flush=True)
    sys.exit(1 if c.failed else 0)


if __name__ == "__main__":
    main()
