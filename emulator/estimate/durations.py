"""Estimate: a duration for every trace row of every rank, from the chosen predictors.

Kernels are shared by every rank of a representative trace and timed once; collectives and p2p
depend on where each rank's group sits in the cluster (group size, nodes spanned), so each
distinct (row, size, nodes) is timed once. Collectives whose group leaves the node are timed by
the network model of the cluster description unless the cluster says its own network was
measured (`internode_collectives = "learned"`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from emulator.collate.job import CollatedJob
from emulator.core.hardware import GPUSpec
from emulator.core.ops import op_family
from emulator.core.predictor_io import FALLBACK, LEARNED, signature_frame
from emulator.core.roofline import roofline_durations
from emulator.estimate.base import Predictor, predict_unique
from emulator.estimate.roofline import NETWORK_LABEL, NetworkPredictor
from emulator.trace.schema import COMM_KINDS, HOST_KINDS

_FAMILY, _PHASE, _ITERATION = range(3)  # the parts of an `Estimates.by_family_phase_iteration` key


@dataclass
class Estimates:
    durations: list[np.ndarray]  # per rank, per row (seconds; 0 for rows that launch nothing)
    time_by_source: dict[str, float] = field(default_factory=dict)  # predicted device seconds, all ranks
    kernels: str = ""
    collectives: str = ""
    adjusted_s: float = 0.0  # device seconds (all ranks) the analytical training-condition adjustment added
    # (op family, phase, iteration) -> [device seconds, of which fallback, of which the adjustment], all ranks
    by_family_phase_iteration: dict[tuple[str, str, int], list[float]] = field(default_factory=dict)
    conditions: dict = field(default_factory=dict)  # the kernel predictor's training-condition adjustment

    @property
    def coverage(self) -> dict[str, float]:
        total = sum(self.time_by_source.values()) or 1.0
        return {s: self.time_by_source.get(s, 0.0) / total for s in (LEARNED, FALLBACK)}

    @property
    def adjusted_share(self) -> float:
        return self.adjusted_s / (sum(self.time_by_source.values()) or 1.0)

    def family_budget(self, iterations: list[int], ranks: int) -> dict[str, dict[str, float]]:
        """Per op family, device seconds per iteration and rank over `iterations` (steady ones), with the
        shares timed by the fallback and added by the adjustment."""
        return self._budget(iterations, ranks, by=_FAMILY)

    def phase_budget(self, iterations: list[int], ranks: int) -> dict[str, dict[str, float]]:
        """The compute part of the same (kernels and copies, not collectives) per phase of the step (forward,
        backward, optimizer, other: the module tracker's `phase` of each row): which pass carries a case's
        error, where a measurement splits the step by pass (NeuSight's forward and backward latencies, a CPU
        profile's rows). Communication is left out: a collective's time is where its group meets, which a
        pass-by-pass measurement does not separate (a gloo call returns before its transfer ends)."""
        return self._budget(iterations, ranks, by=_PHASE, skip=COMM_KINDS)

    def _budget(self, iterations: list[int], ranks: int, by: int, skip=()) -> dict[str, dict[str, float]]:
        out: dict[str, list[float]] = {}
        wanted = set(iterations)
        for key, (s, fb, adj) in self.by_family_phase_iteration.items():
            if key[_ITERATION] in wanted and key[_FAMILY] not in skip:
                acc = out.setdefault(key[by], [0.0, 0.0, 0.0])
                acc[0] += s
                acc[1] += fb
                acc[2] += adj
        n = max(len(wanted), 1) * max(ranks, 1)
        return {k: {"device_s": s / n, "fallback_share": fb / s if s else 0.0,
                    "adjusted_share": adj / s if s else 0.0}
                for k, (s, fb, adj) in sorted(out.items(), key=lambda kv: -kv[1][0])}


def _add_budget(budget: dict, families, phases, iterations, d, fallback, adjusted, weight: float) -> None:
    for fam, ph, it, dd, fb, adj in zip(families, phases, iterations, d, fallback, adjusted, strict=True):
        acc = budget.setdefault((fam, ph, it), [0.0, 0.0, 0.0])
        acc[0] += dd * weight
        acc[1] += (dd if fb else 0.0) * weight
        acc[2] += adj * weight


def estimate(job: CollatedJob, spec: GPUSpec, kernels: Predictor, collectives: Predictor,
             gpus_per_node: int | None = None, learned_internode: bool = False) -> Estimates:
    """Durations for every row of every rank of `job` on `spec`.

    Collectives and p2p whose group spans nodes are timed by the network model of the cluster
    description (`spec`'s NIC bandwidth and latency, labelled fallback) unless `learned_internode`:
    a cross-node measurement describes the network it was taken on, and the public ones come from
    other clusters' networks (the reference A100 rows reach 6-8 GB/s per GPU pair, a quarter of one
    HDR NIC). Use the learned inter-node fit when the predictors were calibrated on this cluster.
    """
    gpn = gpus_per_node or job.nproc_per_node
    by_source: dict[str, float] = {}
    rep_count: dict[int, int] = {}
    for v in job.ranks:
        rep_count[v.rep.rank] = rep_count.get(v.rep.rank, 0) + 1
    # kernels: shared by every rank of a representative
    base: dict[int, np.ndarray] = {}
    frames, owners = [], []
    for r, rep in job.reps.items():
        rows = [i for i, (k, launch) in enumerate(zip(rep.kind, rep.launches, strict=True))
                if launch and k not in COMM_KINDS]
        base[r] = np.zeros(len(rep))
        if rows:
            frames.append(signature_frame(rep.table, rows))
            owners.append((r, rows))
    budget: dict = {}
    adjusted_total = 0.0
    if frames:
        allk = pd.concat(frames, ignore_index=True)
        d, s, a = predict_unique(kernels, allk)
        guessed = allk["args"].str.contains('"unsupported": true', regex=False).to_numpy()
        if guessed.any():  # best-guess rows of `--allow-unsupported`: no predictor knows the op
            d, s, a = d.copy(), s.copy(), a.copy()
            d[guessed] = roofline_durations(allk[guessed], spec)
            s[guessed] = FALLBACK
            a[guessed] = 0.0
        i = 0
        for r, rows in owners:
            n = len(rows)
            base[r][rows] = d[i:i + n]
            for src in ("learned", "fallback"):
                by_source[src] = by_source.get(src, 0.0) + float(d[i:i + n][s[i:i + n] == src].sum()) * rep_count[r]
            adjusted_total += float(a[i:i + n].sum()) * rep_count[r]
            rep = job.reps[r]
            _add_budget(budget, [op_family(rep.op[j]) for j in rows], [rep.phase[j] for j in rows],
                        [rep.iteration[j] for j in rows], d[i:i + n], s[i:i + n] == FALLBACK, a[i:i + n], rep_count[r])
            i += n
    # ops the host's CPU runs on offloaded tensors: no GPU predictor applies; the host model of the
    # roofline (labelled fallback), host time rather than device time in the coverage shares
    for r, rep in job.reps.items():
        hosts = [i for i, k in enumerate(rep.kind) if k in HOST_KINDS]
        if hosts:
            base[r][hosts] = roofline_durations(signature_frame(rep.table, hosts), spec)
    # collectives and p2p: depend on where each rank's groups sit in the cluster (size, nodes spanned), which
    # is a property of the trace's group and peer slots (emulator.collate.views): ranks of one trace whose
    # slots sit alike share their rows' keys and one durations array
    comm_sig: dict[int, list[dict]] = {}
    for r, rep in job.reps.items():
        if rep.comm_rows:
            comm_sig[r] = signature_frame(rep.table, rep.comm_rows).to_dict("records")
    spans, everyone = _Spans(job), range(job.world_size)
    keys: dict[tuple, int] = {}
    key_rows: list[dict] = []
    placements: dict[tuple, list] = {}  # (trace, slot placement) -> [row key ids, number of ranks]
    of_rank: list[tuple | None] = []
    for v in job.ranks:
        rep = v.rep
        if not rep.comm_rows:
            of_rank.append(None)
            continue
        sl = rep.slots
        groups = tuple(spans.group(v.members(g, everyone)) for g in range(len(sl.group_keys)))
        peers = tuple(spans.pair(v.rank, v.rank if p is None else p) for p in v.peers)
        place = (rep.rank, groups, peers)
        hit = placements.get(place)
        if hit is None:
            ids = []
            for j, row in enumerate(rep.comm_rows):
                k = sl.pos[row]
                size, nn = peers[sl.peer_slot[k]] if rep.kind[row] == "p2p" else groups[sl.group_slot[k]]
                key = (rep.rank, j, size, nn)
                if key not in keys:
                    keys[key] = len(key_rows)
                    d = dict(comm_sig[rep.rank][j])
                    d.update(collective=rep.collective[row], coll_bytes=int(rep.coll_bytes[row] or 0),
                             group_size=size, nnodes=nn, gpus_per_node=gpn)
                    key_rows.append(d)
                ids.append(keys[key])
            hit = placements[place] = [ids, 0]
        hit[1] += 1
        of_rank.append(place)
    # the roofline already is the network model: only a learned predictor is split at the node boundary
    network_apart = not learned_internode and not collectives.is_analytical
    cd, cs = _predict_comm(key_rows, collectives, NetworkPredictor(spec), network_apart)
    arrays: dict[tuple, np.ndarray] = {}
    for place, (ids, count) in placements.items():
        rep = job.reps[place[0]]
        arr = arrays[place] = base[rep.rank].copy()
        arr[rep.comm_rows] = cd[ids]
        src = cs[ids]
        for s in ("learned", "fallback"):
            by_source[s] = by_source.get(s, 0.0) + float(cd[ids][src == s].sum()) * count
        _add_budget(budget, [rep.kind[j] for j in rep.comm_rows], [rep.phase[j] for j in rep.comm_rows],
                    [rep.iteration[j] for j in rep.comm_rows], cd[ids], src == FALLBACK, np.zeros(len(ids)), count)
    durations = [base[v.rep.rank] if place is None else arrays[place]
                 for v, place in zip(job.ranks, of_rank, strict=True)]
    label = collectives.label
    if network_apart and any(d["nnodes"] > 1 for d in key_rows):
        label += f"; between nodes: {NETWORK_LABEL}"
    return Estimates(durations=durations, time_by_source=by_source, kernels=kernels.label, collectives=label,
                     adjusted_s=adjusted_total, by_family_phase_iteration=budget, conditions=kernels.conditions())


class _Spans:
    """(group size, nodes spanned) of a rank set, worked out once per distinct set: the ranks of a large job
    share their groups' tuples, and the whole job's group is a few thousand ranks long."""

    def __init__(self, job: CollatedJob):
        self.job = job
        self._by_id: dict[int, tuple] = {}  # id(members) -> (members, (size, nodes)): members kept alive

    def group(self, members) -> tuple[int, int]:
        hit = self._by_id.get(id(members))
        if hit is None:
            hit = self._by_id[id(members)] = (members, (len(members), self.job.nodes_spanned(members)))
        return hit[1]

    def pair(self, rank: int, peer: int) -> tuple[int, int]:
        return 2, self.job.nodes_spanned((rank, peer))


def _predict_comm(rows: list[dict], collectives: Predictor, network: Predictor,
                  network_apart: bool) -> tuple[np.ndarray, np.ndarray]:
    """Durations and sources of the distinct collective rows: from `collectives`, except those across
    nodes when `network_apart`, which `network` times."""
    d, s = np.zeros(len(rows)), np.empty(len(rows), dtype=object)
    inter = np.array([network_apart and r["nnodes"] > 1 for r in rows], dtype=bool)
    for pred, mask in ((collectives, ~inter), (network, inter)):
        idx = np.flatnonzero(mask)
        if len(idx):
            d[idx], s[idx], _ = predict_unique(pred, pd.DataFrame([rows[i] for i in idx]))
    return d, s
