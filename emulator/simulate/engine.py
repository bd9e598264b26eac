"""Discrete-event simulation of every rank of the job.

Model (per rank):
- The **host** walks the trace in host order. Before each device call it spends the recorded
  `host_gap_s`, plus `launch_overhead_s` for calls that launch device work; the rows one CUDA-graph
  replay launched (`graph_replay`) cost one launch together, the graph launch. It only blocks where
  a real host blocks: `stream_sync`, `device_sync`, and a synchronous device-to-host copy; a
  `host_op` (an op on offloaded host tensors) runs on the host itself, for its duration; on a
  CPU target (`synchronous`) also on every op and blocking collective, which run on its own time.
- Each **stream** is a FIFO: an op starts at max(its launch time, the end of the stream's
  previous op) and runs for its estimated duration. `event_record` stamps the time the stream's
  prior work ends; `event_wait` holds the waiting stream until that stamp (CUDA semantics: a
  wait on an event not yet recorded is a no-op).
- A **synchronous collective** runs on the issuing stream; an **asynchronous** one (`async_op`
  in the row's args) runs on a per-(rank, group) communication stream after the issuing
  stream's prior work, and is joined at its wait row (`event_wait` with the same group and
  coll_seq) or, when the program recorded no wait (DDP's reducer waits in C++), at the next
  optimizer step or iteration boundary. A collective starts when every member of the group has
  reached it on its stream (matched by (group, coll_seq)); all members finish together.
- **p2p** send/recv run on per-(rank, direction, peer) streams, so a batched send+recv pair
  between two pipeline stages does not deadlock; the n-th send from a to b meets the n-th recv
  of b from a. Sync p2p is joined on the issuing stream at once; async p2p at its wait row
  (`event_wait` naming it in args `waits_for`, with its group, coll_seq and peer). Traces
  without p2p wait rows join an async recv at once (the stage's next compute consumes the
  activation) and an async send at the next optimizer step / iteration end.
Overlap of communication with compute and pipeline bubbles fall out of these rules; nothing
models them explicitly. Not modelled: contention between concurrent collectives for the same
links, and slowdown of kernels overlapped with communication.

Mechanics: every stream runs ahead as far as its dependencies are known; a stream whose head
needs an unknown time (a collective other ranks have not reached, an event another stream has
not recorded) stops, and the event that resolves it (`events.CollectiveDone`, `StreamStep`,
`HostStep`, ordered by (time, kind, id)) restarts it. What a stream holds and the keys that match
collectives are the small named types of `simulate.streams`. Per-op work is a few list
operations, so the cost grows with rows x ranks; `simulate` runs classes of provably identical
ranks once (`simulate.classes`), which is what keeps a 1,024-rank job in seconds.
"""

from __future__ import annotations

import gc
import heapq
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from emulator.collate.hangs import HangIssue, HangReport
from emulator.collate.job import CollatedJob, RankView
from emulator.simulate import events as ev
from emulator.simulate.streams import (
    Collective,
    CollectiveKey,
    MessageKey,
    P2PWaitKey,
    Record,
    SideStream,
    Wait,
)
from emulator.trace.schema import COMM_KINDS, DEVICE_KINDS, HOST_KINDS

# The stream items and keys are NamedTuples; built with tuple.__new__ they skip NamedTuple's Python-level
# __new__ (the same object, several times cheaper: the engine builds millions of them).
_new = tuple.__new__


class _Stream:
    __slots__ = ("items", "free", "in_coll", "waiting")

    def __init__(self):
        self.items: deque = deque()
        self.free = 0.0
        self.in_coll = False  # head collective has arrived and waits for its peers
        self.waiting = None  # token the head wait is registered on


class _RankState:
    __slots__ = ("view", "rep", "dur", "start", "end", "issue", "pos", "host_t", "streams", "tok", "waiters",
                 "host_wait", "pending_async", "unwaited", "event_tok", "sends", "recvs", "done", "cur_iter",
                 "prev_phase")

    def __init__(self, view: RankView, dur: np.ndarray):
        n = len(view.rep)
        self.view, self.rep, self.dur = view, view.rep, dur
        self.start = np.zeros(n)
        self.end = np.zeros(n)
        self.issue = [0.0] * n  # when the host launched each kernel row
        self.pos = 0
        self.host_t = 0.0
        self.streams: dict = {}
        self.tok: list = []  # token -> resolved time or None
        self.waiters: dict = defaultdict(list)  # token -> streams waiting on it
        self.host_wait: list = []
        self.pending_async: dict = {}  # CollectiveKey / P2PWaitKey -> completion token
        self.unwaited: dict = {}  # completion tokens of async comm with no wait seen yet (ordered set)
        self.event_tok: dict = {}
        self.sends: dict = defaultdict(int)
        self.recvs: dict = defaultdict(int)
        self.done = False
        self.cur_iter = None
        self.prev_phase = None

    def stream(self, key) -> _Stream:
        s = self.streams.get(key)
        if s is None:
            s = self.streams[key] = _Stream()
        return s

    def new_token(self) -> int:
        self.tok.append(None)
        return len(self.tok) - 1


@dataclass
class SimResult:
    """Start/end of every row of every rank, the collectives that ran, and a hang report if any."""

    job: CollatedJob
    start: list[np.ndarray]
    end: list[np.ndarray]
    host_end: list[float]
    issue: list[list[float]] = field(default_factory=list)  # when each rank's host launched each kernel row
    collectives: dict = field(default_factory=dict)  # key -> (start, end, [(rank, row)])
    hang: HangReport | None = None
    wall_s: float = 0.0


class Simulator:
    def __init__(self, job: CollatedJob, durations: list[np.ndarray], launch_overhead_s: float = 4e-6,
                 only: list[int] | None = None, synchronous: bool = False):
        """`only`: simulate these ranks (class representatives, see `classes.quotient`); a collective then
        expects one arrival per simulated member. `synchronous`: the device runs each op on the host's
        own time, as a CPU does (the host waits for every kernel and every blocking collective)."""
        if len(durations) != len(job.ranks):
            raise ValueError(f"{len(durations)} duration arrays for {len(job.ranks)} ranks")
        self.job = job
        self.launch = launch_overhead_s
        self.synchronous = synchronous
        chosen = range(len(job.ranks)) if only is None else only
        self.present = None if only is None else set(only)
        self.ranks = [_RankState(job.ranks[r], durations[r]) for r in chosen]
        self.by_rank = {rs.view.rank: rs for rs in self.ranks}
        self.heap: list = []
        self.pending: dict = {}  # collective key -> [ready, dur, members, expected]
        self.running: dict = {}  # collective key -> members, between arrival of the last and completion
        self.collectives: dict = {}

    # -- event loop -------------------------------------------------------------------------------
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        for rs in self.ranks:
            heapq.heappush(self.heap, ev.host_step(0.0, rs.view.rank))
        heap = self.heap
        # The run allocates millions of small stream items and keys and makes no reference cycles: the
        # cyclic collector would only rescan them, over and over (tuple subclasses are never untracked).
        gc_was_on = gc.isenabled()
        gc.disable()
        try:
            while heap:
                heapq.heappop(heap).handle(self)
        finally:
            if gc_was_on:
                gc.enable()
        hang = self._hang_report()
        return SimResult(job=self.job, start=[r.start for r in self.ranks], end=[r.end for r in self.ranks],
                         host_end=[r.host_t for r in self.ranks], issue=[r.issue for r in self.ranks],
                         collectives=self.collectives, hang=hang,
                         wall_s=time.perf_counter() - t0)

    # -- streams ----------------------------------------------------------------------------------
    def advance(self, rs: _RankState, key) -> None:
        q = rs.streams[key]
        items = q.items
        while items:
            it = items[0]
            t = type(it)
            if t is int:  # a kernel: its row; the host left its launch time in `issue`
                row = it
                issued = rs.issue[row]
                s = q.free if q.free > issued else issued
                e = s + rs.dur[row]
                rs.start[row] = s
                rs.end[row] = e
                q.free = e
            elif t is Record:
                self._resolve(rs, it.token, q.free)
            elif t is Wait:
                v = rs.tok[it.token]
                if v is None:
                    if q.waiting != it.token:
                        q.waiting = it.token
                        rs.waiters[it.token].append(key)
                    return
                q.waiting = None
                if v > q.free:
                    q.free = v
            else:
                if not q.in_coll:
                    q.in_coll = True
                    self._arrive(rs, key, it)
                return
            items.popleft()

    def _resolve(self, rs: _RankState, tok: int, t: float) -> None:
        rs.tok[tok] = t
        rank = rs.view.rank
        for key in rs.waiters.pop(tok, ()):
            heapq.heappush(self.heap, ev.stream_step(t, rank, key))
        if rs.host_wait and all(rs.tok[x] is not None for x in rs.host_wait):
            heapq.heappush(self.heap, ev.host_step(t, rank))

    def _arrive(self, rs: _RankState, key, item: Collective) -> None:
        row, issue, ckey, expected = item
        q = rs.streams[key]
        ready = q.free if q.free > issue else issue
        p = self.pending.get(ckey)
        if p is None:
            p = self.pending[ckey] = [ready, rs.dur[row], [], expected]
        else:
            if ready > p[0]:
                p[0] = ready
            if rs.dur[row] > p[1]:
                p[1] = rs.dur[row]
        p[2].append((rs, key, row))
        if len(p[2]) >= p[3]:
            del self.pending[ckey]
            self.running[ckey] = p[2]
            heapq.heappush(self.heap, ev.collective_done(p[0] + p[1], ckey, p[0]))

    def finish_collective(self, e: ev.CollectiveDone) -> None:
        members = self.running.pop(e.key)
        self.collectives[e.key] = (e.start, e.time, [(rs.view.rank, row) for rs, _, row in members])
        for rs, key, row in members:
            rs.start[row] = e.start
            rs.end[row] = e.time
            q = rs.streams[key]
            q.free = e.time
            q.in_coll = False
            q.items.popleft()
            self.advance(rs, key)

    def _push(self, rs: _RankState, key, item) -> None:
        q = rs.stream(key)
        q.items.append(item)
        if len(q.items) == 1:
            self.advance(rs, key)

    # -- host -------------------------------------------------------------------------------------
    def _block_host(self, rs: _RankState, toks: list[int]) -> bool:
        """Wait for `toks`; True if the host must stop (some still unresolved)."""
        if all(rs.tok[t] is not None for t in toks):
            rs.host_t = max([rs.host_t] + [rs.tok[t] for t in toks])
            return False
        rs.host_wait = toks
        return True

    def _wait_for_stream(self, rs: _RankState, stream) -> bool:
        """The host waits for everything queued on `stream` so far; True if it must stop for now."""
        tok = rs.new_token()
        self._push(rs, stream, _new(Record, (tok,)))
        return self._block_host(rs, [tok])

    def run_host(self, rs: _RankState) -> None:
        if rs.done:
            return
        if rs.host_wait:
            if not all(rs.tok[t] is not None for t in rs.host_wait):
                return
            rs.host_t = max([rs.host_t] + [rs.tok[t] for t in rs.host_wait])
            rs.host_wait = []
        rep, view = rs.rep, rs.view
        kinds, streams, gaps, launches, paid = rep.kind, rep.stream, rep.host_gap, rep.launches, rep.pays_launch
        iters, phases = rep.iteration, rep.phase
        n = len(kinds)
        world = self.job.world_size
        while rs.pos < n:
            pos = rs.pos
            rs.pos += 1
            k = kinds[pos]
            sk = streams[pos]
            if rs.unwaited and (iters[pos] != rs.cur_iter or (phases[pos] == "optimizer"
                                                               and rs.prev_phase != "optimizer")):
                for tok in rs.unwaited:  # async comm never waited for: joined at the step / iteration end
                    self._push(rs, sk, _new(Wait, (tok,)))
                rs.unwaited.clear()
            rs.cur_iter, rs.prev_phase = iters[pos], phases[pos]
            rs.host_t += gaps[pos]
            if k in HOST_KINDS:  # the host's CPU runs it, in program order
                rs.start[pos] = rs.host_t
                rs.host_t += rs.dur[pos]
                rs.end[pos] = rs.host_t
                continue
            if k in DEVICE_KINDS:
                if not launches[pos]:
                    rs.start[pos] = rs.end[pos] = rs.host_t
                    continue
                if paid[pos]:
                    rs.host_t += self.launch
                rs.issue[pos] = rs.host_t
                self._push(rs, sk, pos)
                if (rep.blocking[pos] or self.synchronous) and self._wait_for_stream(rs, sk):
                    return
                continue
            rs.start[pos] = rs.end[pos] = rs.host_t
            if k in COMM_KINDS:
                if paid[pos]:
                    rs.host_t += self.launch
                self._issue_comm(rs, view, pos, sk, world)
                if self.synchronous and not rep.async_op[pos] and self._wait_for_stream(rs, sk):
                    return
            elif k == "event_record":
                tok = rs.new_token()
                rs.event_tok[rep.event_id[pos]] = tok
                self._push(rs, sk, _new(Record, (tok,)))
            elif k == "event_wait":
                g, seq = view.group.get(pos), rep.coll_seq[pos]
                if g is not None and seq is not None:
                    wf = rep.waits_for[pos]
                    key = _new(P2PWaitKey, (g, seq, view.peer.get(pos), wf)) if wf in ("send", "recv") \
                        else _new(CollectiveKey, (g, seq))
                    tok = rs.pending_async.pop(key, None)
                    if tok is not None:
                        rs.unwaited.pop(tok, None)
                else:
                    tok = rs.event_tok.get(rep.event_id[pos])
                if tok is not None:
                    self._push(rs, sk, _new(Wait, (tok,)))
            elif k == "stream_sync":
                if self._wait_for_stream(rs, sk):
                    return
            elif k == "device_sync":
                toks = []
                for key in list(rs.streams):
                    tok = rs.new_token()
                    self._push(rs, key, _new(Record, (tok,)))
                    toks.append(tok)
                if self._block_host(rs, toks):
                    return
        if rs.unwaited:  # the trace ended with un-joined async work: the rank ends when it completes
            toks = list(rs.unwaited)
            rs.unwaited.clear()
            for tok in toks:
                self._push(rs, streams[n - 1] if n else 0, _new(Wait, (tok,)))
        rs.done = True

    def _issue_comm(self, rs: _RankState, view: RankView, pos: int, sk, world: int) -> None:
        rep = rs.rep
        g, seq = view.group.get(pos), rep.coll_seq[pos]
        if rep.kind[pos] == "collective":
            members = view.group_ranks.get(pos) or range(world)
            expected = len(members) if self.present is None else sum(1 for m in members if m in self.present)
            item = _new(Collective, (pos, rs.host_t, _new(CollectiveKey, (g, seq)), expected))
            if not rep.async_op[pos]:
                self._push(rs, sk, item)
                return
            comm_key = _new(SideStream, ("comm", g))
        else:
            peer = view.peer.get(pos)
            if rep.collective[pos] == "send":
                key = _new(MessageKey, (view.rank, peer, rs.sends[peer]))
                rs.sends[peer] += 1
                comm_key = _new(SideStream, ("send", peer))
            else:
                key = _new(MessageKey, (peer, view.rank, rs.recvs[peer]))
                rs.recvs[peer] += 1
                comm_key = _new(SideStream, ("recv", peer))
            item = _new(Collective, (pos, rs.host_t, key, 2))
        ready_tok, done_tok = rs.new_token(), rs.new_token()
        self._push(rs, sk, _new(Record, (ready_tok,)))
        self._push(rs, comm_key, _new(Wait, (ready_tok,)))
        self._push(rs, comm_key, item)
        self._push(rs, comm_key, _new(Record, (done_tok,)))
        if rep.kind[pos] == "p2p":
            coll = rep.collective[pos]
            if not rep.async_op[pos] or (coll == "recv" and not rep.p2p_waits):
                # a sync p2p returns when done; without recorded p2p waits (older traces) a received buffer is
                # taken to be consumed by the issuing stream's next op, as pipeline schedules do
                self._push(rs, sk, _new(Wait, (done_tok,)))
                return
            if rep.p2p_waits and g is not None and seq is not None:
                rs.pending_async[_new(P2PWaitKey, (g, seq, view.peer.get(pos), coll))] = done_tok
            rs.unwaited[done_tok] = True
            return
        if g is not None and seq is not None:
            rs.pending_async[_new(CollectiveKey, (g, seq))] = done_tok
        rs.unwaited[done_tok] = True

    # -- hangs --------------------------------------------------------------------------------------
    def _hang_report(self) -> HangReport | None:
        stuck = [rs.view.rank for rs in self.ranks
                 if not rs.done or any(q.items for q in rs.streams.values())]
        if not stuck and not self.pending:
            return None
        issues = []
        for ckey, (_, _, members, _expected) in self.pending.items():
            arrived = sorted(rs.view.rank for rs, _, _ in members)
            rs0, _, row = members[0]
            coll = rs0.rep.collective[row]
            if isinstance(ckey, CollectiveKey):
                ranks = list(rs0.view.group_ranks.get(row) or range(self.job.world_size))
                missing = [r for r in ranks if r not in arrived]
                issues.append(HangIssue("missing", ckey.group, ranks, ckey.seq, coll, arrived, missing,
                                        f"{coll} #{ckey.seq} on group {ckey.group!r} (ranks {ranks}): ranks "
                                        f"{arrived} wait for ranks {missing}, which are blocked elsewhere"))
            else:
                src, dst, k = ckey
                missing = [r for r in (src, dst) if r not in arrived]
                issues.append(HangIssue("p2p", None, [src, dst], k, "send/recv", arrived, missing,
                                        f"message {k} from rank {src} to rank {dst}: rank {arrived[0]} waits, "
                                        f"rank {missing[0] if missing else '?'} never gets there"))
        if not issues:
            issues.append(HangIssue("missing", None, stuck, None, "event", [], stuck,
                                    f"ranks {stuck[:10]} wait on events that are never recorded"))
        return HangReport(issues=issues[:10], total=len(issues))


def simulate(job: CollatedJob, durations: list[np.ndarray], launch_overhead_s: float = 4e-6,
             classes: bool | None = None, synchronous: bool = False) -> SimResult:
    """Run the discrete-event simulation of `job` with per-rank, per-row durations (seconds).

    `classes`: simulate each class of provably identical ranks once (`simulate.classes`); default on
    for jobs over 64 ranks, where it is what keeps a 1,024-rank simulation in seconds. Results are
    the same either way; with classes, `collectives` lists only the representatives' ones."""
    from emulator.simulate.classes import quotient

    use = classes if classes is not None else job.world_size > 64
    q = quotient(job, durations) if use else None
    if q is None:
        return Simulator(job, durations, launch_overhead_s, synchronous=synchronous).run()
    reps, cls = q
    t0 = time.perf_counter()
    res = Simulator(job, durations, launch_overhead_s, only=reps, synchronous=synchronous).run()
    by_rep = {r: k for k, r in enumerate(reps)}
    idx = [by_rep[reps[c]] for c in cls]
    return SimResult(job=job, start=[res.start[k] for k in idx], end=[res.end[k] for k in idx],
                     host_end=[res.host_end[k] for k in idx], issue=[res.issue[k] for k in idx],
                     collectives=res.collectives, hang=res.hang,
                     wall_s=time.perf_counter() - t0)
