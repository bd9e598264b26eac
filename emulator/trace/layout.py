"""The output folder of `maya emulate` / `maya profile` / `maya simulate`, one place for every path.

    OUT/trace/rank=R/part-0.parquet   rank R's trace (emulator.trace.schema), one folder per emulated rank
    OUT/ranks/rank=R.json             rank R's summary, written by its worker (RankSummary)
    OUT/logs/rank=R.log               rank R's stdout and stderr
    OUT/emulation.json                the job summary, written by the launcher (EmulationSummary)
    OUT/prediction.json               the prediction, written by `maya simulate` / `maya predict`
    OUT/timeline.json                 the simulated timeline (Chrome trace / Perfetto)

Only the ranks actually emulated have a trace; `emulation.json`'s `rank_map` maps every rank of
the job to the emulated rank whose trace it shares (rank deduplication).
"""

from __future__ import annotations

from pathlib import Path

EMULATION_JSON = "emulation.json"
PREDICTION_JSON = "prediction.json"
TIMELINE_JSON = "timeline.json"
EXCHANGE_DIR = ".exchange"  # Python objects passed between emulated ranks (emulator.distributed.objects)
RANK_FOLDERS = ("trace", "ranks", "logs")


def rank_trace_path(out: Path, rank: int) -> Path:
    return Path(out) / "trace" / f"rank={rank}" / "part-0.parquet"


def rank_summary_path(out: Path, rank: int) -> Path:
    return Path(out) / "ranks" / f"rank={rank}.json"


def rank_log_path(out: Path, rank: int) -> Path:
    return Path(out) / "logs" / f"rank={rank}.log"


PROGRESS_FILE_ENV = "MAYA_PROGRESS_FILE"  # the worker writes its optimizer steps there when the launcher sets it


def rank_progress_path(out: Path, rank: int) -> Path:
    """One `STEPS UNIX_TIME` line per optimizer step a running rank reaches (the launcher prints them live)."""
    return Path(out) / "logs" / f"rank={rank}.progress"


def emulated_ranks(out: Path) -> list[int]:
    """The ranks with a trace folder, in order."""
    base = Path(out) / "trace"
    if not base.is_dir():
        return []
    ranks = []
    for p in base.iterdir():
        name, _, value = p.name.partition("=")
        if name == "rank" and value.isdigit():
            ranks.append(int(value))
    return sorted(ranks)
