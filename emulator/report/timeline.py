"""`OUT/timeline.json`: the simulated run in Chrome trace format (open in Perfetto or chrome://tracing).

One process per rank, one thread per stream (the program's streams keep their ids; the
communication streams the simulator adds for async collectives and p2p get ids from 1000 with a
descriptive name), a complete ("X") event per device op, and flow events linking the members of
each collective so a reader can follow who waited for whom. Large jobs are cut to the first
`max_ranks` ranks (the file says so in `otherData`) to keep the file openable.
"""

from __future__ import annotations

import json
from pathlib import Path

from emulator.core.files import atomic_write_bytes
from emulator.simulate.engine import SimResult
from emulator.simulate.streams import CollectiveKey
from emulator.trace.schema import COMM_KINDS, HOST_KINDS

HOST_THREAD = 999  # the thread of `host_op` rows (ops the host's CPU runs on offloaded tensors)


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


def build_timeline(result: SimResult, max_ranks: int = 64) -> dict:
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


def write_timeline(path: Path, result: SimResult, max_ranks: int = 64) -> Path:
    """Write the timeline atomically (temp file + rename): an interrupted write leaves the old file."""
    path = Path(path)
    atomic_write_bytes(path, json.dumps(build_timeline(result, max_ranks), separators=(",", ":")).encode())
    return path
