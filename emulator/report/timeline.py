"""`OUT/timeline.json`: the simulated run in Chrome trace format (open in Perfetto or chrome://tracing).

One process per rank, one thread per stream (the program's streams keep their ids; the
communication streams the simulator adds for async collectives and p2p get ids from 1000 with a
descriptive name), a complete ("X") event per device op, and flow events linking the members of
each collective so a reader can follow who waited for whom. Large jobs are cut to the first
`max_ranks` ranks (the file says so in `otherData`) to keep the file openable.

Each rank also has a host lane (thread HOST_TID, shown first): the simulated Python thread, one
slice per run of host work in one phase of one iteration and one `wait` slice wherever the host
blocked on the device (a stream or device synchronize, a blocking copy, every op on a CPU target),
and a `memory` counter track: the caching allocator's allocated and reserved MiB after each op
that changed them, at the host time the op was issued (allocation follows host order).
"""

from __future__ import annotations

import json
from pathlib import Path

from emulator.core.files import atomic_write_bytes
from emulator.simulate.engine import SimResult
from emulator.simulate.streams import CollectiveKey
from emulator.trace.schema import COMM_KINDS, DEVICE_KINDS, HOST_KINDS

HOST_TID = 100_000  # above any stream id and the communication lanes
HOST_THREAD = 999  # the thread of `host_op` rows (ops the host CPU runs on offloaded tensors)
MIN_WAIT_S = 1e-6  # shorter host waits are not drawn
MiB = 2**20


def _thread(view, row: int, names: dict) -> int:
    """Thread id of the stream a row ran on (mirrors where the engine put it); records its name."""
    rep = view.rep
    k = rep.kind[row]
    if k in COMM_KINDS and (rep.async_op[row] or k == "p2p"):
        name = f"{rep.collective[row]} peer {view.peer.get(row)}" if k == "p2p" else f"comm {view.group.get(row)}"
        for tid, n in names.items():
            if n == name:
                return tid
        tid = 1000 + sum(1 for t in names if t >= 1000)
        names[tid] = name
        return tid
    if k in HOST_KINDS:
        names.setdefault(HOST_THREAD, "host (CPU ops)")
        return HOST_THREAD
    tid = int(rep.stream[row])
    names.setdefault(tid, f"stream {tid}")
    return tid


def host_times(view, start, issue, launch_overhead_s: float) -> list[float]:
    """The simulated host clock after each row of a rank (before any wait the row makes it do): a kernel's
    launch time, a collective's issue plus its launch, other rows' own time (the engine's rules)."""
    rep = view.rep
    out = []
    for i, k in enumerate(rep.kind):
        if k in DEVICE_KINDS and rep.launches[i]:
            out.append(issue[i])
        elif k in COMM_KINDS:
            out.append(start[i] + launch_overhead_s)
        else:
            out.append(start[i])
    return out


def _host_lane(view, pid: int, hosts: list[float], launch_overhead_s: float) -> list[dict]:
    """Slices of host work (merged per phase and iteration) and of host waits on the device."""
    rep = view.rep
    events: list[dict] = []
    run = None  # [start, end, phase, iteration] of the host work slice being grown
    prev = 0.0
    for i, h in enumerate(hosts):
        spent = rep.host_gap[i] + (launch_overhead_s if (rep.kind[i] in DEVICE_KINDS and rep.launches[i])
                                   or rep.kind[i] in COMM_KINDS else 0.0)
        wait = h - prev - spent
        if wait > MIN_WAIT_S and i > 0:
            if run is not None:
                events.append(_slice(run, pid))
                run = None
            events.append(dict(ph="X", name=f"wait: {rep.op[i - 1]}", cat="host_wait", pid=pid, tid=HOST_TID,
                               ts=prev * 1e6, dur=wait * 1e6, args={"iteration": rep.iteration[i - 1]}))
        busy_from = h - spent
        key = (rep.phase[i], rep.iteration[i])
        if run is not None and (run[2], run[3]) == key:
            run[1] = h
        else:
            if run is not None:
                events.append(_slice(run, pid))
            run = [busy_from, h, *key]
        prev = h
    if run is not None:
        events.append(_slice(run, pid))
    return events


def _slice(run: list, pid: int) -> dict:
    start, end, phase, iteration = run
    return dict(ph="X", name=f"{phase} (host)", cat="host", pid=pid, tid=HOST_TID, ts=start * 1e6,
                dur=max(end - start, 0.0) * 1e6, args={"iteration": iteration, "phase": phase})


def _memory_track(view, pid: int, hosts: list[float]) -> list[dict]:
    """Counter events of the allocator's state, one per change."""
    t = view.rep.table
    if "mem_allocated" not in t.column_names:
        return []
    alloc = t.column("mem_allocated").to_pylist()
    reserved = t.column("mem_reserved").to_pylist() if "mem_reserved" in t.column_names else [None] * len(alloc)
    events, last = [], None
    for h, a, r in zip(hosts, alloc, reserved, strict=True):
        if a is None:
            continue
        state = (a, r)
        if state != last:
            args = {"allocated MiB": a / MiB}
            if r is not None:
                args["reserved MiB"] = r / MiB
            events.append(dict(ph="C", name="memory", pid=pid, ts=h * 1e6, args=args))
            last = state
    return events


def build_timeline(result: SimResult, max_ranks: int = 64, launch_overhead_s: float = 0.0) -> dict:
    job = result.job
    events: list[dict] = []
    ranks = job.ranks[:max_ranks]
    shown = {v.rank for v in ranks}
    where: dict[tuple[int, int], tuple[int, float]] = {}
    for v in ranks:
        rep, r = v.rep, v.rank
        start, end = result.start[r], result.end[r]
        modules = rep.table.column("module").to_pylist() if "module" in rep.table.column_names else None
        events.append(dict(ph="M", name="process_name", pid=r, args={"name": f"rank {r}"}))
        events.append(dict(ph="M", name="process_sort_index", pid=r, args={"sort_index": r}))
        if result.issue:
            hosts = host_times(v, start, result.issue[r], launch_overhead_s)
            events.append(dict(ph="M", name="thread_name", pid=r, tid=HOST_TID, args={"name": "host (python)"}))
            events.append(dict(ph="M", name="thread_sort_index", pid=r, tid=HOST_TID, args={"sort_index": -1}))
            events += _host_lane(v, r, hosts, launch_overhead_s)
            events += _memory_track(v, r, hosts)
        tids: dict = {}
        for i, k in enumerate(rep.kind):
            if not rep.launches[i] and k not in HOST_KINDS:
                continue
            tid = _thread(v, i, tids)
            a = {"iteration": rep.iteration[i], "phase": rep.phase[i]}
            if modules and modules[i]:
                a["module"] = modules[i]
            if k in COMM_KINDS:
                a.update(group=v.group.get(i), coll_seq=rep.coll_seq[i], bytes=rep.coll_bytes[i],
                         peer=v.peer.get(i))
            events.append(dict(ph="X", name=rep.op[i], cat=k, pid=r, tid=tid, ts=start[i] * 1e6,
                               dur=max(end[i] - start[i], 0.0) * 1e6, args=a))
            if k in COMM_KINDS:
                where[(r, i)] = (tid, start[i] * 1e6)
        for tid, label in tids.items():
            events.append(dict(ph="M", name="thread_name", pid=r, tid=tid, args={"name": label}))
    flow_id = 0
    for key, (_, _, members) in result.collectives.items():
        members = [m for m in members if m[0] in shown]
        if len(members) < 2:
            continue
        r0, row0 = members[0]
        tid0, ts0 = where[(r0, row0)]
        for r, row in members[1:]:
            tid, ts = where[(r, row)]
            flow_id += 1
            name = f"{key.group}#{key.seq}" if isinstance(key, CollectiveKey) else f"p2p {key.src}->{key.dst}#{key.n}"
            events.append(dict(ph="s", id=flow_id, name=name, cat="collective", pid=r0, tid=tid0, ts=ts0))
            events.append(dict(ph="f", bp="e", id=flow_id, name=name, cat="collective", pid=r, tid=tid, ts=ts))
    other = {"world_size": job.world_size, "ranks_shown": len(ranks)}
    if len(ranks) < len(job.ranks):
        other["note"] = f"first {len(ranks)} of {len(job.ranks)} ranks shown"
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_timeline(path: Path, result: SimResult, max_ranks: int = 64, launch_overhead_s: float = 0.0) -> Path:
    """Write the timeline atomically (temp file + rename): an interrupted write leaves the old file."""
    path = Path(path)
    timeline = build_timeline(result, max_ranks, launch_overhead_s)
    atomic_write_bytes(path, json.dumps(timeline, separators=(",", ":")).encode())
    return path
