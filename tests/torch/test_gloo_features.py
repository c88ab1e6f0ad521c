# SPDX-License-Identifier: Apache-2.0
"""What Gloo's users rely on, on the "braid" backend (PyTorch 2.x), with 3 processes:

  - init_process_group("cpu:braid,cuda:gloo"): braid is the group's CPU backend (a CPU
    build of PyTorch has no NCCL to name for "cuda"; the mapping is the same);
  - PyTorch 2's uint32, uint64 and float8 dtypes;
  - recv without src (receive from any source) and the sender it reports;
  - sparse all_reduce (and DDP on an embedding with sparse gradients);
  - batch_isend_irecv around a ring; coalesced all_reduce, all_gather_into_tensor and
    reduce_scatter_tensor under the coalescing manager;
  - object collectives; all_to_all_single with uneven splits; gather and scatter;
  - new_subgroups; Work.get_future();
  - profiler events named for the operation, with the input shapes;
  - DDP with no_sync() and a communication hook, against a model trained in one process;
  - a barrier that times out says "Timed out", and a new group works afterwards.
Prints one line per failed check; exits 1 on any failure.
"""
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

import braid_torch  # noqa: F401  (registers the backend)

failures = []


def check(name, ok, detail=""):
    if not ok:
        failures.append(name)
        print(f"rank {dist.get_rank()}: FAIL {name} {detail}", flush=True)


def mixed_init(rank, size):
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    check("cpu:braid gives braid for the CPU", isinstance(backend, braid_torch.ProcessGroupBraid),
          type(backend).__name__)
    t = torch.full((5,), float(rank))
    dist.all_reduce(t)
    check("all_reduce on the mixed group", torch.equal(t, torch.full((5,), 3.0)))


def more_dtypes(rank, size):
    # PyTorch 2's unsigned and float8 types map to Braid's; small integers are exact in all.
    for dtype in (torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2):
        t = torch.full((7,), float(rank + 1)).to(dtype)
        dist.all_reduce(t)
        check(f"all_reduce {dtype}", torch.equal(t.float(), torch.full((7,), 6.0)), f"{t}")
        m = torch.full((3,), float(rank + 1)).to(dtype)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        check(f"all_reduce MAX {dtype}", torch.equal(m.float(), torch.full((3,), 3.0)), f"{m}")


def any_source(rank, size):
    if rank == 0:
        seen = {}
        for _ in range(size - 1):
            t = torch.zeros(4)
            src = dist.recv(t)
            seen[src] = t
        check("recv from any source: every sender once", sorted(seen) == [1, 2], f"{sorted(seen)}")
        check("recv from any source: each sender's data",
              all(torch.equal(t, torch.full((4,), float(s))) for s, t in seen.items()))
        # Another tag: it cannot be taken for one of the messages above (Gloo matches
        # receives from any source by tag as well).
        t = torch.zeros(2)
        work = dist.irecv(t, tag=7)
        work.wait()
        check("irecv from any source: _source_rank", work._source_rank() == 2 and t[0].item() == 20,
              f"{work._source_rank()} {t}")
    else:
        dist.send(torch.full((4,), float(rank)), 0)
        if rank == 2:
            dist.send(torch.full((2,), 20.0), 0, tag=7)


def sparse(rank, size):
    # Rank r holds 1s at r and r + 1 of 8: the sum has overlaps and untouched entries.
    idx = torch.tensor([[rank, rank + 1]])
    t = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0]), (8,))
    dist.all_reduce(t)
    want = torch.zeros(8)
    for r in range(size):
        want[r] += 1.0
        want[r + 1] += 2.0
    check("sparse all_reduce", t.is_sparse and torch.equal(t.to_dense(), want), f"{t}")

    # A 2-d sparse tensor with a dense dimension, and a rank that holds nothing.
    n = 0 if rank == 1 else 2
    t = torch.sparse_coo_tensor(torch.tensor([[0, 3][:n]]), torch.ones(n, 3) * (rank + 1), (5, 3))
    dist.all_reduce(t)
    want = torch.zeros(5, 3)
    want[0] = want[3] = 1.0 + 3.0
    check("sparse all_reduce, dense dims, one rank empty", torch.equal(t.to_dense(), want))


def p2p_and_coalesced(rank, size):
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    got = torch.zeros(3)
    ops = [dist.P2POp(dist.isend, torch.full((3,), float(rank)), nxt),
           dist.P2POp(dist.irecv, got, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check("batch_isend_irecv ring", torch.equal(got, torch.full((3,), float(prv))))

    a, b = torch.ones(4), torch.full((2,), float(rank))
    with dist._coalescing_manager(async_ops=True) as cm:
        dist.all_reduce(a)
        dist.all_reduce(b)
    cm.wait()
    check("coalesced all_reduce", torch.equal(a, torch.full((4,), 3.0)) and
          torch.equal(b, torch.full((2,), 3.0)))

    outs = [torch.zeros(2 * size), torch.zeros(size)]
    with dist._coalescing_manager():
        dist.all_gather_into_tensor(outs[0], torch.full((2,), float(rank)))
        dist.all_gather_into_tensor(outs[1], torch.full((1,), float(rank)))
    check("coalesced all_gather_into_tensor",
          torch.equal(outs[0], torch.arange(size).float().repeat_interleave(2)) and
          torch.equal(outs[1], torch.arange(size).float()))

    o1 = torch.zeros(2)
    with dist._coalescing_manager():
        dist.reduce_scatter_tensor(o1, torch.arange(2 * size).float())
    check("coalesced reduce_scatter_tensor",
          torch.equal(o1, torch.arange(2 * rank, 2 * rank + 2).float() * size), f"{o1}")


def objects_and_uneven(rank, size):
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "s": "x" * rank})
    check("all_gather_object", objs == [{"rank": r, "s": "x" * r} for r in range(size)])
    lst = [f"from {rank}", rank] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    check("broadcast_object_list", lst == ["from 0", 0])
    out = [None] * size if rank == 0 else None
    dist.gather_object(("g", rank), out, dst=0)
    if rank == 0:
        check("gather_object", out == [("g", r) for r in range(size)])
    got = [None]
    dist.scatter_object_list(got, [[r] for r in range(size)] if rank == 0 else None, src=0)
    check("scatter_object_list", got == [[rank]])

    # all_to_all_single, uneven: rank r sends p + 1 rows to rank p (row value 10r + p).
    send_splits = [p + 1 for p in range(size)]
    recv_splits = [rank + 1] * size
    inp = torch.cat([torch.full((p + 1, 2), 10.0 * rank + p) for p in range(size)])
    out = torch.zeros(sum(recv_splits), 2)
    dist.all_to_all_single(out, inp, recv_splits, send_splits)
    want = torch.cat([torch.full((rank + 1, 2), 10.0 * q + rank) for q in range(size)])
    check("all_to_all_single uneven", torch.equal(out, want), f"{out}")

    g = [torch.zeros(2) for _ in range(size)] if rank == 1 else None
    dist.gather(torch.full((2,), float(rank)), g, dst=1)
    if rank == 1:
        check("gather", all(torch.equal(g[r], torch.full((2,), float(r))) for r in range(size)))
    s = torch.zeros(3)
    dist.scatter(s, [torch.full((3,), float(r * r)) for r in range(size)] if rank == 2 else None,
                 src=2)
    check("scatter", torch.equal(s, torch.full((3,), float(rank * rank))))


def subgroups_and_futures(rank, size):
    sub, subs = dist.new_subgroups(group_size=1)
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, group=sub)
    check("new_subgroups of one", torch.equal(t, torch.full((2,), float(rank))))
    for g in subs:
        dist.destroy_process_group(g)
    pair = dist.new_group([0, 2])
    if rank != 1:
        t = torch.ones(3)
        fut = dist.all_reduce(t, group=pair, async_op=True).get_future()
        val = fut.then(lambda f: f.value()[0] + 1).wait()
        check("get_future on a subgroup", torch.equal(val, torch.full((3,), 3.0)))
    dist.destroy_process_group(pair)


def profiler(rank, size):
    x = torch.ones(3, 4)
    with torch.autograd.profiler.profile(record_shapes=True) as prof:
        dist.all_reduce(x)
        dist.all_gather_into_tensor(torch.zeros(3 * size, 4), x)
        with dist._coalescing_manager():
            dist.all_reduce(torch.ones(2))
            dist.all_reduce(torch.ones(5))
    names = [e.name for e in prof.function_events]
    ar = [e for e in prof.function_events if e.name == "braid:all_reduce"]
    check("profiler: braid:all_reduce with its shape", any(e.input_shapes == [[3, 4]] for e in ar),
          f"{[(e.name, e.input_shapes) for e in ar]}")
    # The coalesced pair is one call (all_reduce_coalesced) with both shapes.
    check("profiler: coalesced calls under their own name",
          any(e.input_shapes == [[2], [5]] for e in ar), f"{[(e.name, e.input_shapes) for e in ar]}")
    check("profiler: all_gather_into_tensor", "braid:all_gather_into_tensor" in names, f"{names}")


def ddp(rank, size):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    ref = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 2))
    ref.load_state_dict(model.state_dict())
    net = DDP(model)
    net.register_comm_hook(dist.group.WORLD, default_hooks.allreduce_hook)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    torch.manual_seed(1)
    data = [torch.randn(size, 4, 6) for _ in range(4)]  # per step: every rank's batch
    for step, batch in enumerate(data):
        if step % 2 == 0:
            opt.zero_grad()
            with net.no_sync():  # gradients accumulate locally, reduced on the next step
                net(batch[rank]).sum().backward()
            continue
        net(batch[rank]).sum().backward()
        opt.step()
        # The reference sees every rank's batch of both steps; DDP averages over ranks.
        ropt.zero_grad()
        for b in (data[step - 1], batch):
            (ref(b.reshape(-1, 6)).sum() / size).backward()
        ropt.step()
    ok = all(torch.allclose(p, q, rtol=1e-4, atol=1e-5)
             for p, q in zip(net.module.parameters(), ref.parameters()))
    check("DDP with no_sync and a comm hook matches one process", ok)

    emb = DDP(nn.EmbeddingBag(10, 3, mode="sum", sparse=True))
    out = emb(torch.tensor([rank, rank + 1]), torch.tensor([0]))
    out.sum().backward()
    g = emb.module.weight.grad
    want = torch.zeros(10, 3)
    for r in range(size):
        want[r] += 1.0 / size
        want[r + 1] += 1.0 / size
    check("DDP with sparse gradients", g.is_sparse and torch.allclose(g.to_dense(), want))


def timeouts(rank, size):
    g = dist.new_group([0, 1], timeout=timedelta(seconds=1))
    if rank == 0:
        try:
            dist.barrier(group=g)
            check("barrier times out", False, "no exception")
        except RuntimeError as e:
            check("barrier timeout says Timed out", " Timed out " in str(e), str(e))
    dist.destroy_process_group(g)
    g = dist.new_group([0, 1])
    if rank in (0, 1):
        t = torch.ones(2)
        dist.all_reduce(t, group=g)
        check("a new group after a timeout", torch.equal(t, torch.full((2,), 2.0)))
    dist.destroy_process_group(g)


def main():
    dist.init_process_group("cpu:braid,cuda:gloo", timeout=timedelta(seconds=120))
    rank, size = dist.get_rank(), dist.get_world_size()
    assert size == 3, "run with 3 processes"
    for step in (mixed_init, more_dtypes, any_source, sparse, p2p_and_coalesced, objects_and_uneven,
                 subgroups_and_futures, profiler, ddp, timeouts):
        step(rank, size)
        dist.barrier()
    dist.destroy_process_group()
    print(f"rank {rank}: {len(failures)} failed", flush=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
