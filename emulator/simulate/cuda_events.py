"""What the program's CUDA timing events would read on the target: the simulated time between them.

A step timer (`start.record(); ...; end.record(); start.elapsed_time(end)`) reads a placeholder
during emulation (emulated events carry no time, see `emulator.device.cuda_shim`), and the read
leaves an ELAPSED_TIME_MARKER row naming the two events. An event records when its stream
reaches it: after every row issued on that stream before it (streams run in order), and not
before the host issued it. For each pair of events the program read, this gives the simulated
milliseconds of every read, on the first rank (the one whose log a user reads).
"""

from __future__ import annotations

import json
import statistics

from emulator.simulate.engine import SimResult
from emulator.trace.schema import COMM_KINDS, DEVICE_KINDS, ELAPSED_TIME_MARKER

MAX_READS = 64  # reads listed per pair of events (the median covers them all)


def cuda_event_timings(result: SimResult) -> list[dict]:
    """[{start_event, end_event, reads, median_ms, simulated_ms}] for each pair of events rank 0 timed."""
    rep = result.job.ranks[0].rep
    start, end = result.start[0], result.end[0]
    if ELAPSED_TIME_MARKER not in rep.op:
        return []
    args = rep.table.column("args").to_pylist()
    stream_done: dict[int, float] = {}  # when each stream finishes what was issued on it so far
    recorded: dict[int, float] = {}  # event id -> when its latest record happened on its stream
    reads: dict[tuple[int, int], list[float]] = {}
    for pos, kind in enumerate(rep.kind):
        s = rep.stream[pos]
        if (kind in DEVICE_KINDS and rep.launches[pos]) or (kind in COMM_KINDS and not rep.async_op[pos]):
            stream_done[s] = max(stream_done.get(s, 0.0), float(end[pos]))
        elif kind == "event_record":
            recorded[rep.event_id[pos]] = max(float(start[pos]), stream_done.get(s, 0.0))
        elif kind == "marker" and rep.op[pos] == ELAPSED_TIME_MARKER:
            a = json.loads(args[pos] or "{}")
            pair = (a.get("start"), a.get("end"))
            if pair[0] in recorded and pair[1] in recorded:
                reads.setdefault(pair, []).append((recorded[pair[1]] - recorded[pair[0]]) * 1e3)
    return [{"start_event": s, "end_event": e, "reads": len(ms), "median_ms": statistics.median(ms),
             "simulated_ms": ms[:MAX_READS]} for (s, e), ms in reads.items()]
