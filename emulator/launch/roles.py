"""Rank deduplication: emulate a job's distinct roles, not every rank.

In a data/tensor/pipeline-parallel job most ranks do exactly the same work as some other rank,
only with different peers. A 1,024-GPU job typically has a handful of roles (one per pipeline
stage, say), so emulating every rank wastes 99 % of the time. How roles are found:

1. Emulate rank 0 and the last rank. Rank 0's summary lists every process group the program
   created; the last rank is the *base* roles are probed around, because rank 0 often does
   extra work of its own (logging, checkpointing) and keeps its own trace when its work differs.
2. Derive *partitions* of the world from those groups: sets of disjoint, equal-sized groups
   that together cover every rank (each DeviceMesh dimension is one; the world group is not
   used unless there is nothing else). A group family that does not cover the world is kept
   as an incomplete partition and always treated as significant.
3. For each complete partition, emulate another member of the base's group (a *probe*) and
   compare its work hash (`emulator.trace.workhash`: blind to rank ids and group names) with the base's:
   equal means a rank's position along that partition does not change its work. When it
   differs and the group has 4+ members, a second interior member is probed: if the two
   interior members agree, only the ends of the group are special (FSDP's last rank holds the
   padded shard), and the interior is one class.
4. A rank's *role* is its tuple of positions along the significant partitions. One
   representative per role is emulated (an already emulated rank other than 0 when possible,
   else the highest), and every rank maps to its role's representative (`rank_map`).
5. Optionally `verify` K random non-representatives: emulate them and check their hash equals
   their representative's; a mismatch is reported (and the rank keeps its own trace).

Probes can be cut short (`probe_iterations`): a probe then runs only its first iterations and is
compared with the base's work hash at the end of the same iteration (`RankSummary.iteration_hashes`).
What makes a position along a partition matter (shard sizes, pipeline stage, TP slice) shows in
every iteration, the first included, so the first iterations decide; a probed rank that turns out to
represent a role, or whose prefix differs from its role's, is run again in full. On a DP or FSDP job,
where the probes do the base's work, this saves all but the first iteration of every probe; along a
pipeline partition a probe that differs costs its first iterations twice. `verify` still emulates
whole ranks and compares whole traces.

The partitions themselves are `emulator.trace.partitions`; turning a representative's trace into
another rank's is `emulator.trace.expand`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from emulator.trace.partitions import Partition, partitions
from emulator.trace.summaries import RankSummary


def probes(parts: list[Partition], base: int) -> list[tuple[int, int]]:
    """(partition index, rank to emulate) per complete partition: a member of `base`'s group at another position.

    The probe differs from `base` only in its position along that partition (in a mesh, its
    coordinates along the other dimensions are the same), so a hash difference is that
    partition's doing.
    """
    out = []
    for i, p in enumerate(parts):
        gi = p.group_of(base)
        if p.complete and gi is not None and len(p.groups[gi]) > 1:
            others = [r for r in p.groups[gi] if r != base]
            # the last other member: ranks that log or checkpoint are usually the first of their group,
            # and their extra work is not the partition's doing
            out.append((i, others[-1]))
    return out


def interior_probes(parts: list[Partition], base: int, probe_list: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """(partition index, rank) one interior position further from `base` than its first probe.

    Only for groups of 4 or more, where the first probe is interior (neither first nor last):
    if the two interior ranks hash equal, the partition only distinguishes its ends (see
    `boundary_position`)."""
    out = []
    for i, first in probe_list:
        p = parts[i]
        gi = p.group_of(base)
        if gi is None or p.size < 4:
            continue
        pos = p.position(first) - 1
        if pos >= 1:
            out.append((i, p.groups[gi][pos]))
    return out


def boundary_position(p: Partition, rank: int) -> int:
    """0 for the first member of its group, 2 for the last, 1 for every interior member.

    Used for partitions whose two probed interior members do the same work while an end member
    differs (FSDP: rank 0 logs, the last rank holds the padded shard). The assumption that all
    interior members then agree is what `--verify`/MAYA_DEDUP_VERIFY checks.
    """
    pos = p.position(rank)
    return 0 if pos == 0 else (2 if pos == p.size - 1 else 1)


def role_keys(world_size: int, parts: list[Partition], significant: list[bool],
            boundary: list[bool] | None = None) -> dict[int, tuple]:
    """rank -> role key (its positions along the significant partitions; ends vs interior for boundary ones)."""
    boundary = boundary or [False] * len(parts)
    sig = [(p, b) for p, s, b in zip(parts, significant, boundary, strict=True) if s]
    return {r: tuple(boundary_position(p, r) if b else p.position(r) for p, b in sig) for r in range(world_size)}


@dataclass
class DedupResult:
    rank_map: dict[int, int]  # every rank -> the emulated rank whose trace it uses
    emulated: list[int]
    partitions: list[Partition]
    significant: list[bool]
    mismatches: list[dict]  # verified ranks whose hash differed from their representative's
    boundary: list[bool] = field(default_factory=list)  # significant only at the group ends (see boundary_position)
    probed: list[int] = field(default_factory=list)  # emulated for their first probe_iterations only
    probe_iterations: int | None = None

    def to_json(self) -> dict:
        boundary = self.boundary or [False] * len(self.partitions)
        return {"partitions": [dict(p.to_json(), significant=s, ends_only=b)
                               for p, s, b in zip(self.partitions, self.significant, boundary, strict=True)],
                "roles": len(set(self.rank_map.values())), "emulated": len(self.emulated),
                "probed": self.probed, "probe_iterations": self.probe_iterations, "mismatches": self.mismatches}


def exchange_units(groups: list[dict], world_size: int, group_name: str | None) -> Callable[[int], list[int]]:
    """unit_of for `deduplicate`: the ranks of `group_name`'s partition that share a group with a rank
    (the whole world when the group is unknown or not part of a partition)."""
    for p in partitions(groups, world_size):
        if p.complete and group_name in p.names:
            return lambda r, p=p: list(p.groups[p.group_of(r)])
    return lambda r: list(range(world_size))


# runs ranks; their summaries (None: failed). With probe_iterations it is also called as
# run_ranks(ranks, iterations=N), each rank stopped after N iterations.
RunRanks = Callable[..., dict[int, RankSummary | None]]


def _hash(summary: RankSummary) -> str | None:
    """The rank's work hash (`emulator.trace.workhash`), written by its worker."""
    return summary.work_hash


def same_work(a: RankSummary, b: RankSummary, prefix: int | None = None) -> bool:
    """Equal work hashes; with `prefix`, equal hashes at the end of iteration `prefix` (a rank probed for
    that many iterations against any other), or equal whole hashes when either never got that far."""
    if prefix is not None and len(a.iteration_hashes) >= prefix and len(b.iteration_hashes) >= prefix:
        return a.iteration_hashes[prefix - 1] == b.iteration_hashes[prefix - 1]
    ha = _hash(a)
    return ha is not None and ha == _hash(b)


def _trace_of(rank: int, rep: int, done: dict[int, RankSummary]) -> int:
    """The trace `rank` uses: its role representative's, unless it was emulated and did other work.

    An emulated rank (rank 0, a probe) whose work hash equals its representative's shares the
    representative's trace rather than keeping its own: then every rank of one role has one trace,
    which is what lets the simulator run each class of ranks once (`emulator.simulate.classes`);
    two traces of the same work differ only in this machine's host-time noise."""
    if rank not in done:
        return rep
    other = done.get(rep)
    if rep == rank or other is None or (done[rank].ok, done[rank].oom) != (other.ok, other.oom):
        return rank  # an OOM rank keeps the trace that shows where it ran out
    return rep if same_work(done[rank], other) else rank


def deduplicate(world_size: int, run_ranks: RunRanks, verify: int = 0, seed: int = 0,
                unit_of: Callable[[int], list[int]] | None = None,
                stand_in: Callable[[], None] | None = None, probe_iterations: int | None = None) -> DedupResult | None:
    """Drive the phases above. `run_ranks(ranks)` emulates ranks (in parallel) and returns their summaries;
    a missing summary, or one neither ok nor OOM, stops the search (None is returned: the caller reports
    the failure). An OOM rank counts as emulated: its trace up to the failed allocation shows its role.

    `unit_of(rank)` names ranks that must be emulated together with `rank` (programs that exchange
    Python objects between ranks, like pipelining's shape inference), and `run_ranks` is expected to
    run a batch all at once. Without `stand_in`, every batch is widened to whole units. With it, only
    the base's unit runs side by side first; then `stand_in()` lets a rank read a missing peer's
    objects from the same position of that unit (`emulator.distributed.objects`), and later batches
    are not widened: a 1,024-rank TP x PP x DP job then emulates one pipeline plus its probes,
    instead of one whole pipeline per rank it needs.

    `probe_iterations`: run probes for that many iterations only (`run_ranks(ranks, iterations=N)`; see
    the module docstring). Not with units that are widened: a unit's ranks must run to the same point.
    """
    done: dict[int, RankSummary] = {}
    probed: set[int] = set()  # ranks whose run was cut short at probe_iterations
    widen = unit_of is not None

    def run(ranks: list[int], iterations: int | None = None) -> bool:
        if widen:
            ranks = [u for r in ranks for u in unit_of(r)]
        todo = [r for r in dict.fromkeys(ranks) if r not in done]
        if not todo:
            return True
        got = run_ranks(todo, iterations=iterations) if iterations else run_ranks(todo)
        done.update({r: s for r, s in got.items() if s is not None})
        if iterations:
            probed.update(r for r in todo if r in done and done[r].stopped_by_iterations)
        return all(r in done and (done[r].ok or done[r].oom) for r in todo)

    def same(a: int, b: int) -> bool:
        return same_work(done[a], done[b], probe_iterations if probed & {a, b} else None)

    # Rank 0 often does extra work (logging, checkpoints), so roles are probed around the last rank
    # instead, and rank 0 is always emulated (it keeps its own trace when its work differs).
    base = world_size - 1
    if unit_of is not None and stand_in is not None:
        if not run([base]):
            return None
        stand_in()
        widen = False
    if not run([0, base]):
        return None
    short = probe_iterations if probe_iterations and not widen else None
    parts = partitions(done[0].groups, world_size)
    probe_list = probes(parts, base)
    if not run([r for _, r in probe_list], short):
        return None
    significant = [True] * len(parts)
    for i, r in probe_list:
        significant[i] = not same(r, base)
    boundary = [False] * len(parts)
    inner = [(i, r) for i, r in interior_probes(parts, base, probe_list) if significant[i]]
    if inner and not run([r for _, r in inner], short):
        return None
    first_probe = dict(probe_list)
    for i, r in inner:
        boundary[i] = same(r, first_probe[i])
    keys = role_keys(world_size, parts, significant, boundary)
    rep_of_class: dict[tuple, int] = {}
    # Representatives: ranks already emulated first, highest first (again: low ranks are the ones
    # that tend to log), never rank 0 unless it is alone in its class.
    for r in sorted(done, reverse=True):
        if r != 0:
            rep_of_class.setdefault(keys[r], r)
    for r in range(world_size - 1, 0, -1):
        rep_of_class.setdefault(keys[r], r)
    reps = sorted(set(rep_of_class.values()))
    # a probed rank that represents its role, or whose first iterations differ from its role's, needs
    # its whole trace: run it again in full
    again = [r for r in sorted(probed) if r in reps or not same(r, rep_of_class[keys[r]])]
    for r in again:
        del done[r]
        probed.discard(r)
    if not run(sorted(set(reps) | set(again))):
        return None
    rank_map = {}
    for r in range(world_size):
        rep = rep_of_class.get(keys[r], r)
        rank_map[r] = rep if r in probed else _trace_of(r, rep, done)  # a probed rank's own trace is partial
    mismatches: list[dict] = []
    if verify > 0:
        candidates = [r for r in range(world_size) if r not in done]
        picked = sorted(random.Random(seed).sample(candidates, min(verify, len(candidates))))
        if unit_of is not None:
            picked = sorted({u for r in picked for u in unit_of(r)} - set(done))
        if picked and not run(picked):
            return None
        for r in picked:
            rep = rank_map[r]
            if not same_work(done[r], done[rep]):
                rank_map[r] = r  # it keeps its own trace
                mismatches.append({"rank": r, "representative": rep})
    return DedupResult(rank_map=rank_map, emulated=sorted(done), partitions=parts, significant=significant,
                       mismatches=mismatches, boundary=boundary, probed=sorted(probed),
                       probe_iterations=probe_iterations if probed else None)


