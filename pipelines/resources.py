"""Partitions and settings shared by every calibration asset.

Partitions are GPU types (maya keys from `emulator.core.hardware`, plus `cpu` for the local
processor): one partition's assets must run on a node that has that part, which a fleet
deployment routes with the `maya/gpu` run tag.
"""


from pathlib import Path

import dagster as dg

from emulator.core.hardware import known_gpus

GPU_PARTITIONS = dg.StaticPartitionsDefinition(sorted(set(known_gpus()) | {"cpu"}))

# The Dagster instance maya sets up (`make dagster`, `maya calibrate`) when DAGSTER_HOME has no dagster.yaml:
# no telemetry; runs queued, one at a time per `maya/gpu` tag value; the concurrency pools of
# pipelines.calibration.assets limited to one step each.
INSTANCE_YAML = """telemetry:
  enabled: false
concurrency:
  runs:
    tag_concurrency_limits:
      - key: maya/gpu
        value:
          applyLimitPerUniqueValue: true
        limit: 1
  pools:
    default_limit: 1
"""


def ensure_instance(home: Path) -> Path:
    """DAGSTER_HOME with maya's instance settings unless the team keeps its own dagster.yaml there."""
    home = Path(home)
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        (home / "dagster.yaml").write_text(INSTANCE_YAML)
    return home

# default time budgets (seconds): a default GPU kernel sweep fits in ~8 min; the CPU chain in ~10 min in all
DEFAULT_KERNEL_BUDGET_S = {"cpu": 200.0, "gpu": 480.0}
DEFAULT_COLLECTIVE_BUDGET_S = {"cpu": 45.0, "gpu": 120.0}


class WarehouseResource(dg.ConfigurableResource):
    """Where measurements go: `root` or, empty, $MAYA_WAREHOUSE / ./warehouse (emulator.core.settings)."""

    root: str = ""

    def path(self) -> Path:
        if self.root:
            return Path(self.root).resolve()
        from emulator.core.settings import warehouse_root

        return warehouse_root()


class KernelBenchConfig(dg.Config):
    """Run config of `kernel_benchmarks` (also what the trace sensor sets)."""

    budget_s: float = 0.0  # 0 = the default for the device type
    traces: list[str] = []  # emulation output folders whose signatures are benchmarked first
    sweep: bool = True  # also run the designed sweep
    chunk_size: int = 12
    repeats: int = 15
    max_seconds_per_signature: float = 1.0
    threads: int = 0  # CPU threads (0 = one, as each rank of a job runs)
    run_id: str = ""  # empty: resume the unfinished calibration of this GPU, else a new id


class CollectiveBenchConfig(dg.Config):
    budget_s: float = 0.0
    ranks: int = 0  # 0 = 2 on CPU, every local GPU otherwise
    max_bytes: int = 0  # 0 = 4 MiB on CPU, min(1 GiB, free memory / 8) on a GPU
    repeats: int = 10
    size_step: int = 4
    run_id: str = ""


class InTrainingBenchConfig(dg.Config):
    """Run config of `in_training_benchmarks` (CPU only): which calibration programs, for how long."""

    budget_s: float = 600.0  # programs started after this many seconds wait for the next run (resumable)
    only: str = ""  # only the programs whose name contains this (pipelines.runners.in_training.PROGRAMS)
    run_id: str = ""


def budget(config_value: float, defaults: dict, gpu: str) -> float:
    return config_value if config_value > 0 else defaults["cpu" if gpu == "cpu" else "gpu"]
