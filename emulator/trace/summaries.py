"""The typed summaries beside the traces: what one rank's worker and the whole job's launcher report.

    RankSummary        OUT/ranks/rank=R.json  written by the worker of rank R (emulator.capture.session)
    EmulationSummary   OUT/emulation.json     written by the launcher from the rank summaries (emulator.launch)

Each is written in one place and read back through `from_json`, which takes the keys it knows
(an older file's missing keys get their defaults), refuses a schema version it cannot read and a
value of the wrong type (a hand-edited or foreign file fails here, naming the key, rather than
deep inside a simulation). The JSON keys are a contract: tools outside maya read these files.
"""

from __future__ import annotations

import types
import typing
from dataclasses import asdict, dataclass, field, fields

from emulator.core.exitcodes import Exit, outcome

EMULATION_SCHEMA_VERSION = 2
READABLE_EMULATION_VERSIONS = (1, 2)


class SummaryError(ValueError):
    """A summary file maya cannot read (another schema version, not a JSON object, a value of the wrong type)."""


class InterruptedEmulation(SummaryError):
    """The folder's emulation was stopped by Ctrl-C / SIGTERM: its traces are partial, nothing to simulate."""


def _known(cls, data: dict, where: str) -> dict:
    """The keys of `data` that `cls` has, each checked against its field's type."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        if f.name in data:
            value = data[f.name]
            if not _conforms(value, hints[f.name]):
                raise SummaryError(f"{where}: {f.name!r} is {value!r:.60}, not {_type_name(hints[f.name])}")
            out[f.name] = value
    return out


def _conforms(value, tp) -> bool:
    """`value` (parsed JSON) fits the annotation `tp` (a float may be written as an int)."""
    if tp is typing.Any:
        return True
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_conforms(value, a) for a in args)
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    if (origin or tp) is list:
        return isinstance(value, list) and (not args or all(_conforms(v, args[0]) for v in value))
    if (origin or tp) is dict:
        return isinstance(value, dict) and (not args or all(_conforms(v, args[1]) for v in value.values()))
    return True


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) if not typing.get_args(tp) else str(tp)


@dataclass
class RankSummary:
    """One emulated (or profiled) rank: how it ended, its memory peaks, what it recorded."""

    rank: int
    ok: bool = False
    error: str | None = None  # the program's traceback when it failed
    oom: bool = False  # an OOM ended the rank (the program did not catch it)
    oom_message: str | None = None  # the allocator's message of the last OOM, caught or not
    ooms_caught: int = 0  # torch.cuda.OutOfMemoryError the program caught and went on from
    interrupted: bool = False  # stopped by SIGTERM / Ctrl-C: the trace is partial
    setup_failed: bool = False  # the emulator could not start (unknown GPU, device build failed)
    mode: str | None = None  # emulate | cpu | profile | time
    gpu: str | None = None
    torch_version: str | None = None
    world_size: int | None = None
    local_world_size: int | None = None
    peak_allocated: int = 0
    peak_reserved: int = 0
    iterations: int = 0
    stopped_by_iterations: bool = False
    n_events: int = 0
    event_kinds: dict[str, int] = field(default_factory=dict)
    work_hash: str | None = None  # emulator.trace.workhash: equal for ranks that do the same work
    # the work hash of the rows up to the end of each iteration: a rank probed for its first iterations
    # only is compared with its representative at the same point (emulator.launch.roles)
    iteration_hashes: list[str] = field(default_factory=list)
    groups: list[dict] = field(default_factory=list)  # every process group the program made: {name, ranks}
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    placeholders: dict[str, int] = field(default_factory=dict)
    real_value_reads: int = 0
    eager_fallbacks: dict[str, int] = field(default_factory=dict)
    compiled: dict[str, int] = field(default_factory=dict)  # torch.compile calls Inductor planned, and their modes
    wall_s: float = 0.0
    iteration_wall_s: list[float] = field(default_factory=list)  # emulation (or, profiling, the program's) speed
    iteration_cpu_s: list[float] = field(default_factory=list)
    host_clock: str = "process_cpu"  # host_gap_s is process CPU time less the emulator's own
    host_gap_baseline_s: dict = field(default_factory=dict)  # the emulator's per-call prices charged to the gaps
    host_gap_price_samples: list[dict] = field(default_factory=list)
    host_speed: dict | None = None  # emulator.core.hostspeed of this machine, before and after the program
    # s_per_op of that workload at the start and after each iteration: the speed next to each iteration's gaps
    host_speed_by_iteration: list[float] = field(default_factory=list)
    fast_path: dict = field(default_factory=dict)
    routing: str | None = None  # emulator.core.routing: the policy data-dependent sizes followed (emulation)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RankSummary:
        if not isinstance(data, dict) or "rank" not in data:
            raise SummaryError("a rank summary must be a JSON object with a 'rank'")
        return cls(**_known(cls, data, f"rank summary {data['rank']!r}"))


@dataclass
class EmulationSummary:
    """The job: layout, how it ended, memory per rank, which ranks were emulated and whom the others copy."""

    schema_version: int = EMULATION_SCHEMA_VERSION
    mode: str = "emulate"  # emulate | profile
    ok: bool = False  # every rank ended cleanly
    complete: bool = False  # ok, and every rank of the job has a trace (its own or its representative's)
    interrupted: bool = False  # stopped by Ctrl-C / SIGTERM: the traces are partial
    script: str | None = None
    module: str | None = None
    argv: list[str] = field(default_factory=list)
    gpu: str = "h100"
    gpu_name: str | None = None
    gpu_spec: dict | None = None  # the `[gpu]` table of a variant (emulator.core.variants), re-registered on read
    world_size: int = 1
    nnodes: int = 1
    nproc_per_node: int = 1
    torch_version: str | None = None
    iterations_requested: int | None = None
    iterations_found: int = 0
    host_speed: dict | None = None
    host_speed_by_rank: dict[str, list[float]] = field(default_factory=dict)  # RankSummary.host_speed_by_iteration
    peak_allocated_bytes: dict[str, int] = field(default_factory=dict)  # rank (as a string) -> bytes
    peak_reserved_bytes: dict[str, int] = field(default_factory=dict)
    oom: bool = False  # an OOM ended some rank
    oom_ranks: list[int] = field(default_factory=list)
    oom_message: str | None = None
    ooms_caught: dict[str, int] = field(default_factory=dict)  # rank -> OOMs the program caught and went on from
    unsupported_ops: dict[str, int] = field(default_factory=dict)
    placeholders: dict[str, int] = field(default_factory=dict)
    compiled: dict[str, int] = field(default_factory=dict)  # torch.compile calls Inductor planned (and their modes)
    eager_fallbacks: dict[str, int] = field(default_factory=dict)  # torch.compile calls run eagerly
    emulation_wall_s: float = 0.0
    ranks_emulated: list[int] = field(default_factory=list)
    rank_map: dict[str, int] = field(default_factory=dict)  # every rank -> the emulated rank whose trace it shares
    groups: list[dict] = field(default_factory=list)
    failed_rank: int | None = None
    error: str | None = None  # the failing rank's own traceback
    rank_wall_s: dict[str, float] = field(default_factory=dict)
    measured_iterations_s: dict[str, list[float]] | None = None  # profile: each rank's measured iteration times
    work_hash: dict[str, str | None] = field(default_factory=dict)
    dedup: dict | None = None
    routing: str | None = None  # emulator.core.routing: the policy data-dependent sizes followed (emulation)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict, where: str = "emulation.json") -> EmulationSummary:
        if not isinstance(data, dict):
            raise SummaryError(f"{where}: not a JSON object")
        version = data.get("schema_version", 1)
        if version not in READABLE_EMULATION_VERSIONS:
            raise SummaryError(f"{where}: schema version {version!r}, this maya reads versions "
                               f"{list(READABLE_EMULATION_VERSIONS)}; re-run `maya emulate` with this version")
        return cls(**_known(cls, data, where))

    def outcome(self) -> Exit:
        """The exit code of the run this summary describes (emulator.core.exitcodes)."""
        return outcome(interrupted=self.interrupted, oom=self.oom, failed=not (self.ok and self.complete))

    def representative(self, rank: int) -> int:
        """The emulated rank whose trace `rank` uses (itself, or for an emulated rank that did its role's
        work, the role's representative: emulator.launch.roles)."""
        return int(self.rank_map.get(str(rank), rank))

    def per_rank(self, table: dict[str, int]) -> list[int | None]:
        """A per-rank figure (peak memory) for every rank of the job, deduplicated ranks taking their
        representative's."""
        out = []
        for r in range(self.world_size):
            v = table.get(str(r), table.get(str(self.representative(r))))
            out.append(int(v) if v is not None else None)
        return out
