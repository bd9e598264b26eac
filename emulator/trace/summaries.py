"""The typed summaries beside the traces: what one rank's worker and the whole job's launcher report.

    RankSummary        OUT/ranks/rank=R.json  written by the worker of rank R (emulator.capture.session)
    EmulationSummary   OUT/emulation.json     written by the launcher from the rank summaries (emulator.launch)

Each is written in one place and read back through `from_json`, which takes the keys it knows
(an older file's missing keys get their defaults) and refuses a schema version it cannot read.
The JSON keys are a contract: tools outside maya read these files.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields

EMULATION_SCHEMA_VERSION = 2
READABLE_EMULATION_VERSIONS = (1, 2)


class SummaryError(ValueError):
    """A summary file maya cannot read (another schema version, not a JSON object)."""


def _known(cls, data: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class RankSummary:
    """One emulated (or profiled) rank: how it ended, its memory peaks, what it recorded."""

    rank: int
    ok: bool = False
    error: str | None = None  # the program's traceback when it failed
    oom: bool = False
    oom_message: str | None = None
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
    host_speed: dict | None = None  # emulator.core.hostspeed of this machine (rank 0)
    fast_path: dict = field(default_factory=dict)
    routing: str | None = None  # emulator.core.routing: the policy data-dependent sizes followed (emulation)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> RankSummary:
        if not isinstance(data, dict) or "rank" not in data:
            raise SummaryError("a rank summary must be a JSON object with a 'rank'")
        return cls(**_known(cls, data))


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
    world_size: int = 1
    nnodes: int = 1
    nproc_per_node: int = 1
    torch_version: str | None = None
    iterations_requested: int | None = None
    iterations_found: int = 0
    host_speed: dict | None = None
    peak_allocated_bytes: dict[str, int] = field(default_factory=dict)  # rank (as a string) -> bytes
    peak_reserved_bytes: dict[str, int] = field(default_factory=dict)
    oom: bool = False
    oom_ranks: list[int] = field(default_factory=list)
    oom_message: str | None = None
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
        return cls(**_known(cls, data))

    def representative(self, rank: int) -> int:
        """The emulated rank whose trace `rank` uses (itself when it was emulated)."""
        return int(self.rank_map.get(str(rank), rank))

    def per_rank(self, table: dict[str, int]) -> list[int | None]:
        """A per-rank figure (peak memory) for every rank of the job, deduplicated ranks taking their
        representative's."""
        out = []
        for r in range(self.world_size):
            v = table.get(str(r), table.get(str(self.representative(r))))
            out.append(int(v) if v is not None else None)
        return out
