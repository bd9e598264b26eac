"""Hangs: collectives or messages the real job would block on, found before anything is simulated.

Every member of every group must issue the same collectives (matched by (group, coll_seq)) and
every send must have its receive (matched by (peer, order)). A mismatch means the real job would
hang, so collate raises `HangError` carrying a report that names the ranks, the group and the
collective, instead of letting the simulator invent a number. Sizes must agree too, except an
all-to-all's: with uneven splits (an expert-parallel MoE's token dispatch) each rank sends its
own amount, as NCCL's all_to_allv allows.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from emulator.collate.job import CollatedJob



@dataclass
class HangIssue:
    """One collective or p2p exchange the real job would block on."""

    kind: str  # "missing" (some members never issued it), "mismatch" (members issued different ops), "p2p"
    group: str | None
    group_ranks: list[int]
    coll_seq: int | None
    collective: str
    issued_by: list[int]
    missing: list[int]
    detail: str

    def to_dict(self) -> dict:
        return dict(kind=self.kind, group=self.group, group_ranks=self.group_ranks, coll_seq=self.coll_seq,
                    collective=self.collective, issued_by=self.issued_by, missing=self.missing, detail=self.detail)


@dataclass
class HangReport:
    issues: list[HangIssue]
    total: int = 0

    def message(self) -> str:
        lines = ["the real job would hang: collectives do not match across ranks"]
        lines += [f"  - {i.detail}" for i in self.issues]
        if self.total > len(self.issues):
            lines.append(f"  ... and {self.total - len(self.issues)} more")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"message": self.message(), "issues": [i.to_dict() for i in self.issues], "total": self.total}


class HangError(RuntimeError):
    def __init__(self, report: HangReport):
        super().__init__(report.message())
        self.report = report


def check_matching(job: CollatedJob, limit: int = 10) -> HangReport | None:
    """Every group member issued the same collectives, every send has its receive; else a HangReport."""
    if _matches_by_slot(job):
        return None
    return _check_rows(job, limit)


def _matches_by_slot(job: CollatedJob) -> bool:
    """The check over each rank's distinct groups and peers instead of its rows: True when it proves every
    collective and message matches. A rank's rows on one group slot issue the same sequence wherever the
    slot maps, so ranks whose groups hold the same sequence match row for row. Anything this cannot prove
    (a hang, or two slots of a rank naming one group or peer) returns False, and the row check decides
    and reports."""
    world = tuple(range(job.world_size))
    seqs: dict[tuple, int] = {}  # a slot's sequence -> its id
    coll_by_rep: dict[int, dict[int, int]] = {}  # representative -> group slot -> sequence id
    p2p_by_rep: dict[int, dict[int, tuple[tuple, tuple]]] = {}  # representative -> peer slot -> (sent, received)
    for r, rep in job.reps.items():
        coll: dict[int, list] = {}
        p2p: dict[int, tuple[list, list]] = {}
        for i in rep.comm_rows:
            k = rep.slots.pos[i]
            if rep.kind[i] == "p2p":
                sent, received = p2p.setdefault(rep.slots.peer_slot[k], ([], []))
                (sent if rep.collective[i] == "send" else received).append(int(rep.coll_bytes[i] or 0))
                continue
            c = rep.collective[i]
            coll.setdefault(rep.slots.group_slot[k], []).append(
                (int(rep.coll_seq[i] if rep.coll_seq[i] is not None else -1), c,
                 None if c == "all_to_all" else int(rep.coll_bytes[i] or 0)))
        coll_by_rep[r] = {g: seqs.setdefault(tuple(v), len(seqs)) for g, v in coll.items()}
        p2p_by_rep[r] = {p: (tuple(a), tuple(b)) for p, (a, b) in p2p.items()}
    groups: dict = {}  # group name -> (sequence id, members, issuing ranks)
    sends: dict[tuple[int, int], tuple] = {}
    recvs: dict[tuple[int, int], tuple] = {}
    for v in job.ranks:
        named = set()
        for g, sid in coll_by_rep[v.rep.rank].items():
            name, ranks = v.groups[g]
            if name in named:
                return False
            named.add(name)
            members = ranks or world
            hit = groups.get(name)
            if hit is None:
                groups[name] = (sid, members, {v.rank})
            elif hit[0] != sid or (hit[1] is not members and hit[1] != members):
                return False
            else:
                hit[2].add(v.rank)
        peers = set()
        for p, (sent, received) in p2p_by_rep[v.rep.rank].items():
            peer = v.peers[p]
            if peer is None:
                continue
            if peer in peers:
                return False
            peers.add(peer)
            sends[(v.rank, peer)], recvs[(v.rank, peer)] = sent, received
    if any(not issuers.issuperset(members) for _, members, issuers in groups.values()):
        return False
    pairs = set(sends) | {(d, s) for (s, d) in recvs}
    return all(sends.get((s, d), ()) == recvs.get((d, s), ()) for s, d in pairs)


def _check_rows(job: CollatedJob, limit: int) -> HangReport | None:
    """The row-by-row check, which names each collective and message that does not match."""
    issued: dict[tuple[str, int], dict[int, tuple[str, int]]] = defaultdict(dict)
    members: dict[tuple[str, int], tuple[int, ...]] = {}
    sends: dict[tuple[int, int], list[int]] = defaultdict(list)
    recvs: dict[tuple[int, int], list[int]] = defaultdict(list)
    world = tuple(range(job.world_size))
    for v in job.ranks:
        rep = v.rep
        for i in rep.comm_rows:
            if rep.kind[i] == "p2p":
                peer = v.peer.get(i)
                if peer is None:
                    continue
                (sends if rep.collective[i] == "send" else recvs)[(v.rank, peer)].append(int(rep.coll_bytes[i] or 0))
                continue
            key = (v.group.get(i), int(rep.coll_seq[i] if rep.coll_seq[i] is not None else -1))
            coll = rep.collective[i]
            issued[key][v.rank] = (coll, None if coll == "all_to_all" else int(rep.coll_bytes[i] or 0))
            members.setdefault(key, v.group_ranks.get(i) or world)
    issues: list[HangIssue] = []
    for key, by_rank in issued.items():
        group, seq = key
        ranks = list(members[key])
        missing = [r for r in ranks if r not in by_rank]
        first = next(iter(by_rank.values()))
        if missing:
            issues.append(HangIssue(
                "missing", group, ranks, seq, first[0], sorted(by_rank), missing,
                f"{first[0]} #{seq} on group {group!r} (ranks {_fmt(ranks)}) was issued by ranks "
                f"{_fmt(sorted(by_rank))} but never by ranks {_fmt(missing)}"))
        elif len(set(by_rank.values())) > 1:
            variants = defaultdict(list)
            for r, sig in sorted(by_rank.items()):
                variants[sig].append(r)
            desc = "; ".join(f"ranks {_fmt(rs)} issued {s[0]} of {s[1]} bytes" for s, rs in variants.items())
            issues.append(HangIssue("mismatch", group, ranks, seq, first[0], sorted(by_rank), [],
                                    f"collective #{seq} on group {group!r} (ranks {_fmt(ranks)}) differs: {desc}"))
    for (src, dst) in sorted(set(sends) | {(s, d) for (d, s) in recvs}):
        s, r = sends.get((src, dst), []), recvs.get((dst, src), [])
        if len(s) != len(r):
            issues.append(HangIssue(
                "p2p", None, [src, dst], None, "send/recv", [src] if len(s) > len(r) else [dst],
                [dst] if len(s) > len(r) else [src],
                f"rank {src} sends {len(s)} message(s) to rank {dst}, which receives {len(r)} from it"))
        elif s != r:
            k = next(i for i, (a, b) in enumerate(zip(s, r, strict=True)) if a != b)
            issues.append(HangIssue("p2p", None, [src, dst], k, "send/recv", [src, dst], [],
                                    f"message {k} from rank {src} to rank {dst}: {s[k]} bytes sent, {r[k]} received"))
    if not issues:
        return None
    return HangReport(issues=issues[:limit], total=len(issues))


def _fmt(ranks) -> str:
    ranks = list(ranks)
    if len(ranks) > 12:
        return f"[{', '.join(map(str, ranks[:10]))}, ... ({len(ranks)} ranks)]"
    return json.dumps(ranks)
