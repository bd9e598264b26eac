"""vTrain's measured configurations as search groups: one group = one model, GPU count and global batch,
its members the parallel layouts (TP, PP, micro-batch) that were measured.

Rows come from the validation's loader (`pipelines.validation.holdout.load_vtrain`, evaluation only),
so a configuration runs with exactly the program arguments `make validate` uses; the group becomes a
search space whose `[[points]]` are its measured layouts, with the layout flags as templates.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import dataclass, field

from pipelines.validation.holdout import PROGRAMS, REPO_ROOT, Case, case_work, load_vtrain
from pipelines.validation.runner import GPU_ITERATIONS

KNOB_FLAGS = {"tp": "--tp", "pp": "--pp", "micro_batch": "--micro-batch"}
# Emulated optimizer steps a trial runs by default, the first a warm-up. Single-node groups are host-bound, and a
# host gap is a same-position median over the steady iterations (README, "vTrain single node, run to run"): as
# many as the validation emulates. Multi-node groups are device-bound: each steady iteration runs the same kernels
# and collectives, so one predicts what three do, for less emulation (docs/measurements.md, "Fewer emulated
# iterations for device-bound groups").
ITERATIONS = GPU_ITERATIONS
MULTI_NODE_ITERATIONS = 2


def check_iterations(iterations: int) -> int:
    """`iterations` if a trial can emulate that many: a warm-up and at least one steady iteration."""
    if iterations < 2:
        raise ValueError(f"a trial emulates at least 2 iterations (a warm-up and a steady one), got {iterations}")
    return iterations


@dataclass
class Group:
    name: str
    kind: str  # "single" | "multi"
    cases: list[Case] = field(default_factory=list)

    @property
    def first(self) -> Case:
        return self.cases[0]

    @property
    def work(self) -> float:
        """Emulation cost proxy: layer-micro-batches summed over the members (see holdout.case_work)."""
        return sum(case_work(c) for c in self.cases)

    def layout(self, case: Case) -> tuple:
        return tuple(case.parallel[k] for k in KNOB_FLAGS)

    def measured(self) -> dict[tuple, float]:
        """Measured iteration time per layout (the first row when vTrain repeats a layout)."""
        out: dict[tuple, float] = {}
        for c in self.cases:
            out.setdefault(self.layout(c), c.measured_s)
        return out

    def costliest_first(self) -> list[tuple]:
        """The measured layouts, the costliest to emulate first (`case_work`, then the TP degree: more
        collectives a layer), so trials run at once finish together: started last, the one trial that
        costs as much as a quarter of the others would run alone at the end while the other cores idle
        (longest-processing-time-first scheduling). The order changes no trial's result."""
        work: dict[tuple, float] = {}
        for c in self.cases:
            work.setdefault(self.layout(c), case_work(c))
        return sorted(work, key=lambda lay: (-work[lay], -lay[0], lay))

    def trial_iterations(self, asked: int | None = None) -> int:
        """The optimizer steps each trial of this group emulates: `asked`, else the group kind's default (see
        ITERATIONS); at least 2."""
        if asked is None:
            asked = MULTI_NODE_ITERATIONS if self.kind == "multi" else ITERATIONS
        return check_iterations(asked)

    def space_toml(self, iterations: int | None = None) -> str:
        """A search-space file whose points are exactly the group's measured layouts, each emulated for
        `trial_iterations(iterations)` optimizer steps (the first is warm-up)."""
        iterations = self.trial_iterations(iterations)
        c = self.first
        args, i = [], 0
        while i < len(c.args):
            a = c.args[i]
            knob = next((k for k, f in KNOB_FLAGS.items() if f == a), None)
            if knob:
                args += [a, "{" + knob + "}"]
                i += 2
            else:
                args.append(a)
                i += 1
        args += ["--steps", str(iterations + 1)]
        layouts = self.costliest_first()
        lines = ["[knobs]"]
        for j, k in enumerate(KNOB_FLAGS):
            lines.append(f"{k} = {{ values = {sorted({lay[j] for lay in layouts})} }}")
        seq, gb = c.model["seq"], c.parallel["global_batch"]
        lines += ["", "[program]", f"args = {json.dumps(args)}", "", "[cluster]", f'gpu = "{c.gpu}"',
                  f"nnodes = {c.nnodes}", f"nproc_per_node = {c.nproc_per_node}", "", "[predict]",
                  f"iterations = {iterations}", f"tokens_per_iteration = {gb * seq}", ""]
        for lay in layouts:
            lines += ["[[points]]", *(f"{k} = {v}" for k, v in zip(KNOB_FLAGS, lay, strict=True)), ""]
        return "\n".join(lines)


def _group_name(kind: str, c: Case) -> str:
    m, p = c.model, c.parallel
    if kind == "multi":
        params = (12 * m["layers"] * m["hidden"] ** 2 + m["vocab"] * m["hidden"]) / 1e9  # vTrain's label
        return f"multi-{params:.1f}B-{c.world_size}gpu"
    return f"single-{c.world_size}gpu-h{m['hidden']}-L{m['layers']}-gb{p['global_batch']}"


def vtrain_groups(kind: str) -> list[Group]:
    """Every group of vTrain's `ground_truth_<kind>.csv`, in a stable order."""
    groups: dict[str, Group] = {}
    for c in load_vtrain(kind):
        name = _group_name(kind, c)
        groups.setdefault(name, Group(name=name, kind=kind)).cases.append(c)
    return [groups[n] for n in sorted(groups, key=lambda n: (groups[n].first.world_size, n))]


def cheapest_single(groups: list[Group], count: int) -> list[Group]:
    """`count` single-node groups of least emulation work, spread round-robin over 2, 4 and 8 GPUs."""
    by_size: dict[int, list[Group]] = {}
    for g in sorted(groups, key=lambda g: (g.work, g.name)):
        by_size.setdefault(g.first.world_size, []).append(g)
    chosen: list[Group] = []
    while len(chosen) < count and any(by_size.values()):
        for size in sorted(by_size):
            if by_size[size] and len(chosen) < count:
                chosen.append(by_size[size].pop(0))
    return chosen


def program_path(name: str = "imitation") -> str:
    """The validation program `name` (`pipelines.validation.holdout.PROGRAMS`) as an absolute path."""
    if name not in PROGRAMS:
        raise ValueError(f"unknown validation program {name!r}: choose from {', '.join(PROGRAMS)}")
    return str(REPO_ROOT / PROGRAMS[name])


def require_program(name: str) -> str:
    """`program_path(name)`, once what the program imports is here: megatron-core is a test-time extra."""
    path = program_path(name)
    if name == "megatron-core" and importlib.util.find_spec("megatron") is None:
        raise ValueError("the megatron-core program needs megatron-core, which is not installed in this "
                         "environment: `make test-frameworks` installs it")
    return path


PROGRAM = program_path()
