"""GPU variants: the part a team actually rents, described as a known part plus what differs.

Published runs are often on variants (an H100 SXM with 96 GB at a 500 W power limit, an H800 with
NVLink cut to 400 GB/s); a `[gpu]` table in the cluster file, or a `--gpu-spec FILE`, says so:

    [gpu]
    base = "h100-96gb"            # a known part (`maya gpus`); its predictors time the variant
    name = "H100 SXM 96GB 500W"   # how reports name it (default: the base part's name)
    memory_GiB = 96               # capacity the driver exposes
    hbm_bandwidth_TBps = 3.36
    power_limit_w = 500           # sets the sustained clock when sustained_clock_mhz is not given
    sustained_clock_mhz = 1600    # SM clock under a training load (nvidia-smi -q -d CLOCK while training)
    nvlink_bandwidth_GBps = 450   # per GPU, one direction
    price_per_gpu_hour = 2.9      # USD

The variant is registered under a key made from its name, so the emulated device reports its name
and capacity, and the table travels with the job (workers, `emulation.json`) so a later
`maya simulate OUT` times the same part.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import replace
from pathlib import Path

from emulator.core.hardware import GB, GPUS, TB, GPUSpec, get_gpu, register

GPU_TABLE_FIELDS: dict[str, str] = {
    "base": "known part the variant starts from (`maya gpus`); required",
    "name": "the variant's name in reports",
    "memory_GiB": "memory capacity the driver exposes, GiB",
    "hbm_bandwidth_TBps": "DRAM bandwidth, TB/s",
    "power_limit_w": "board power limit, W",
    "sustained_clock_mhz": "SM clock under a training load, MHz",
    "nvlink_bandwidth_GBps": "NVLink bandwidth per GPU, one direction, GB/s",
    "price_per_gpu_hour": "USD per GPU-hour",
}
_POSITIVE = ("memory_GiB", "hbm_bandwidth_TBps", "power_limit_w", "sustained_clock_mhz", "price_per_gpu_hour")


class GPUVariantError(ValueError):
    """A `[gpu]` table with an unknown field, a missing base or a value out of range."""


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")


def variant_from_table(table: dict, where: str = "[gpu]") -> GPUSpec:
    """The variant `table` describes, registered so `get_gpu` finds it in this process."""
    if not isinstance(table, dict):
        raise GPUVariantError(f"{where}: expected a table of GPU fields, got {type(table).__name__}")
    unknown = sorted(set(table) - set(GPU_TABLE_FIELDS))
    if unknown:
        allowed = ", ".join(f"{k} ({v})" for k, v in GPU_TABLE_FIELDS.items())
        raise GPUVariantError(f"{where}: unknown GPU field(s) {unknown}; allowed: {allowed}")
    if "base" not in table:
        raise GPUVariantError(f"{where}: `base` (a known part, see `maya gpus`) is required")
    base = get_gpu(str(table["base"]))
    for k in _POSITIVE:
        if k in table and not (isinstance(table[k], int | float) and table[k] > 0):
            raise GPUVariantError(f"{where}: {k} must be a positive number, got {table[k]!r}")
    if "nvlink_bandwidth_GBps" in table and not (isinstance(table["nvlink_bandwidth_GBps"], int | float)
                                                  and table["nvlink_bandwidth_GBps"] >= 0):
        raise GPUVariantError(f"{where}: nvlink_bandwidth_GBps must be >= 0, got {table['nvlink_bandwidth_GBps']!r}")
    if table.get("power_limit_w", 0) > base.tdp_w:
        raise GPUVariantError(f"{where}: power_limit_w {table['power_limit_w']} is above {base.key}'s "
                              f"{base.tdp_w} W board limit")
    if table.get("sustained_clock_mhz", 0) > base.clock_mhz:
        raise GPUVariantError(f"{where}: sustained_clock_mhz {table['sustained_clock_mhz']} is above {base.key}'s "
                              f"{base.clock_mhz} MHz boost clock")
    changes: dict = {"base": base.model_key, "aliases": (), "variant_table": dict(table)}
    if "memory_GiB" in table:
        changes["memory_bytes"] = int(float(table["memory_GiB"]) * 2**30)
    if "hbm_bandwidth_TBps" in table:
        changes["hbm_bandwidth"] = float(table["hbm_bandwidth_TBps"]) * TB
    if "nvlink_bandwidth_GBps" in table:
        changes["nvlink_bandwidth"] = float(table["nvlink_bandwidth_GBps"]) * GB
    if "price_per_gpu_hour" in table:
        changes["price_per_hour"] = float(table["price_per_gpu_hour"])
    if "power_limit_w" in table:
        changes["power_limit_w"] = int(table["power_limit_w"])
    if "sustained_clock_mhz" in table:
        changes["sustained_clock_mhz"] = int(table["sustained_clock_mhz"])
    name = str(table.get("name") or base.name)
    key = _slug(str(table["name"])) if table.get("name") else f"{base.key}-variant"
    if key in GPUS and GPUS[key].variant_table is None:
        raise GPUVariantError(f"{where}: name {table['name']!r} is a known part's key; give the variant its own name")
    return register(replace(base, key=key, name=name, **changes))


def read_gpu_spec_file(path: Path) -> GPUSpec:
    """`--gpu-spec FILE`: a TOML or JSON file holding a `[gpu]` table (or the fields at top level)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
        data = tomllib.loads(raw.decode()) if path.suffix.lower() == ".toml" else json.loads(raw)
    except OSError as e:
        raise GPUVariantError(f"cannot read GPU spec file {path}: {e}") from e
    except (ValueError, UnicodeDecodeError) as e:
        raise GPUVariantError(f"{path}: not valid {'TOML' if path.suffix.lower() == '.toml' else 'JSON'}: {e}") \
            from e
    table = data.get("gpu", data) if isinstance(data, dict) else data
    return variant_from_table(table, str(path))


def describe_variant(spec: GPUSpec) -> dict | None:
    """What a report says about a variant: its base and every field that differs from it."""
    if spec.base is None:
        return None
    base = get_gpu(spec.base)
    out = {"name": spec.name, "base": base.key}
    for label, mine, theirs in (("memory_GiB", spec.memory_bytes / 2**30, base.memory_bytes / 2**30),
                                ("hbm_bandwidth_TBps", spec.hbm_bandwidth / TB, base.hbm_bandwidth / TB),
                                ("nvlink_bandwidth_GBps", spec.nvlink_bandwidth / GB, base.nvlink_bandwidth / GB),
                                ("power_limit_w", spec.power_limit_w, None),
                                ("sustained_clock_mhz", spec.sustained_clock_mhz, None),
                                ("price_per_gpu_hour", spec.price_per_hour, base.price_per_hour)):
        if mine is not None and (theirs is None or abs(mine - theirs) > 1e-9 * max(abs(theirs), 1)):
            out[label] = round(mine, 4) if isinstance(mine, float) else mine
    return out
