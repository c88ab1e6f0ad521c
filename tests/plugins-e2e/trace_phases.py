#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks the profiler v7 parts of Braid trace files (profiler_run.sh, profiler_lost.sh).

  trace_phases.py [--tag HEX] TRACE.json...

Every KernelCh event (a channel's share of an operation) must come with its three
KernelPhase events, initial_sync, compute and final_sync, one after the other with no gap,
all within the KernelCh event's span on the same channel track. With --tag, every CollApi
and Coll event must carry that user tag (ncclCollConfig_t.userProfilerTag).
"""
import argparse
import json
import sys

PHASES = ["initial_sync", "compute", "final_sync"]


def spans(events, cat):
    """(tid, id) -> [name, begin, end, args] of the async events of one category."""
    out = {}
    for e in events:
        if e.get("cat") != cat or e.get("ph") not in ("b", "e"):
            continue
        rec = out.setdefault((e["tid"], e["id"]), [e["name"], None, None, {}])
        if e["ph"] == "b":
            rec[1] = float(e["ts"])
            rec[3] = e.get("args", {})
        else:
            rec[2] = float(e["ts"])
    return out


def check_file(path, tag):
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    chans = spans(events, "KernelCh")
    # A work item's phases are recorded one after the other: in the pool's order (the
    # event ids) within a channel.
    phases = sorted(((k, v) for k, v in spans(events, "KernelPhase").items()),
                    key=lambda kv: (kv[1][3]["channel"], int(kv[0][1], 16)))
    phases = [v for _, v in phases]
    errors = []
    if not chans:
        errors.append("no KernelCh events")
    if len(phases) != 3 * len(chans):
        errors.append(f"{len(phases)} KernelPhase events for {len(chans)} KernelCh events")
    eps = 0.002  # the trace's ns precision, in us
    for i in range(0, len(phases) - 2, 3):
        trio = phases[i:i + 3]
        names = [p[0] for p in trio]
        if names != PHASES:
            errors.append(f"phases out of order: {names}")
            break
        if any(p[1] is None or p[2] is None or p[2] + eps < p[1] for p in trio):
            errors.append(f"a phase without a span: {trio}")
            break
        if abs(trio[0][2] - trio[1][1]) > eps or abs(trio[1][2] - trio[2][1]) > eps:
            errors.append(f"phases not contiguous: {trio}")
            break
        tid = 1000 + trio[0][3]["channel"]
        if not any(k[0] == tid and c[1] - eps <= trio[0][1] and trio[2][2] <= c[2] + eps
                   for k, c in chans.items()):
            errors.append(f"phases outside every KernelCh span of channel {tid - 1000}: {trio}")
            break
    if tag is not None:
        tagged = [e for e in events if e.get("cat") in ("CollApi", "Coll") and e.get("ph") in ("X", "b")]
        if not tagged:
            errors.append("no CollApi or Coll events")
        for e in tagged:
            if e.get("args", {}).get("userTag") != tag:
                errors.append(f"{e['cat']} event {e['name']} has userTag {e.get('args', {}).get('userTag')}, not {tag}")
                break
    return len(chans), errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tag")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    bad = 0
    for path in a.traces:
        n, errors = check_file(path, a.tag)
        for e in errors:
            print(f"FAIL: {path}: {e}")
        bad += bool(errors)
        if not errors:
            print(f"{path}: {n} KernelCh events, each with its 3 phases" + (f", tag {a.tag}" if a.tag else ""))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
