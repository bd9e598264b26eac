"""Timing one callable on the local device: warm-up, repeats, median and spread, clocks and power.

On a GPU the default is what a training step does to a kernel (`condition = "back_to_back"`): after
a heat soak that brings the clock to what the power limit allows, each repeat launches the op
several times back to back between two CUDA events, at default application clocks, with no L2
flush (the cache holds what the previous launch left, as in a step) and no CUDA-graph replay; the
SM clock and the board power are sampled with NVML around every repeat and stored with the row.
`condition = "isolated"` times one call at a time after flushing L2, as microbenchmarks do.
On the CPU the call is synchronous and `perf_counter` is the honest clock; the thread count is
recorded with every row because it changes CPU timings more than anything.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass
class TimingSettings:
    """How hard to try per signature: enough repeats for a stable median, bounded in time."""

    warmup: int = 2
    repeats: int = 15
    min_repeats: int = 3
    max_seconds: float = 1.0  # per signature, warm-up included (stops adding repeats, never cuts one)
    condition: str = "back_to_back"  # GPU only: "back_to_back" (training conditions) or "isolated"
    launches_per_repeat: int = 8  # back_to_back: calls between the two events of one repeat
    heat_soak_s: float = 10.0  # back_to_back: a sustained GEMM load before the first signature


@dataclass
class Timing:
    median_s: float
    min_s: float
    spread: float  # (p90 - p10) / median
    repeats: int
    clock_mhz: float | None = None
    clock_drop: bool = False
    power_w: float | None = None
    timing: str = "host_timer"  # maya_models.schema TIMINGS: how this row was timed


def _quantile(sorted_xs: list[float], q: float) -> float:
    if len(sorted_xs) == 1:
        return sorted_xs[0]
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples: list[float]) -> tuple[float, float, float]:
    """(median, min, spread) of per-call times; spread = (p90 - p10) / median."""
    xs = sorted(samples)
    med = statistics.median(xs)
    spread = (_quantile(xs, 0.9) - _quantile(xs, 0.1)) / med if med > 0 else 0.0
    return med, xs[0], spread


class ClockSampler:
    """SM clock and board power via NVML around each measurement; flags rows where the clock sagged.

    A row is flagged when the clock sampled while timing fell more than 10% below the highest
    clock seen in this run (thermal or power throttling makes that row slower than the part is).
    No NVML (CPU, or a driver without it) → no clocks, never an error.
    """

    def __init__(self, device_index: int = 0):
        self.handle = None
        self.max_seen = 0.0
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        except Exception:  # pynvml missing or pynvml.NVMLError: clocks are simply not recorded
            self.handle = None

    def sample(self) -> float | None:
        if self.handle is None:
            return None
        try:
            mhz = float(self._nvml.nvmlDeviceGetClockInfo(self.handle, self._nvml.NVML_CLOCK_SM))
        except Exception:
            return None
        self.max_seen = max(self.max_seen, mhz)
        return mhz

    def power(self) -> float | None:
        """Board power in watts, or None without NVML."""
        if self.handle is None:
            return None
        try:
            return float(self._nvml.nvmlDeviceGetPowerUsage(self.handle)) / 1e3
        except Exception:
            return None

    def judge(self, samples: list[float | None]) -> tuple[float | None, bool]:
        got = [s for s in samples if s is not None]
        if not got:
            return None, False
        return statistics.fmean(got), min(got) < 0.9 * self.max_seen


class Timer:
    """Times callables on one device (`cpu` or `cuda:N`)."""

    def __init__(self, device: torch.device, settings: TimingSettings | None = None, l2_bytes: int = 0):
        self.device = device
        self.settings = settings or TimingSettings()
        self.is_cuda = device.type == "cuda"
        self.clocks = ClockSampler(device.index or 0) if self.is_cuda else None
        self._flush_buf = None
        self.back_to_back = self.is_cuda and self.settings.condition == "back_to_back"
        if self.is_cuda and not self.back_to_back:
            l2 = l2_bytes or getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0) or 50 * 2**20
            self._flush_buf = torch.empty(2 * l2, dtype=torch.uint8, device=device)
        self._soaked = False

    def heat_soak(self) -> None:
        """Keep the GPU busy on a large bf16 GEMM for `heat_soak_s`, once: measurements then start at the clock
        the power limit sustains, not at the idle boost clock."""
        if self._soaked or not self.back_to_back or self.settings.heat_soak_s <= 0:
            return
        a = torch.randn(8192, 8192, device=self.device, dtype=torch.bfloat16)
        t_end = time.perf_counter() + self.settings.heat_soak_s
        while time.perf_counter() < t_end:
            for _ in range(8):
                a @ a
            torch.cuda.synchronize(self.device)
        self._soaked = True

    def _batch_cuda(self, fn: Callable[[], object]) -> float:
        n = max(self.settings.launches_per_repeat, 1)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(n):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / n

    def _flush(self) -> None:
        if self._flush_buf is not None:
            self._flush_buf.zero_()

    def _one_cuda(self, fn: Callable[[], object]) -> float:
        self._flush()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3

    @staticmethod
    def _one_cpu(fn: Callable[[], object]) -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def time(self, fn: Callable[[], object]) -> Timing:
        """Warm up, then repeat until `repeats` or the per-signature time cap (at least `min_repeats`)."""
        s = self.settings
        self.heat_soak()
        one = (self._batch_cuda if self.back_to_back else self._one_cuda) if self.is_cuda else self._one_cpu
        t_start = time.perf_counter()
        for _ in range(max(s.warmup, 1)):
            one(fn)
            if time.perf_counter() - t_start > s.max_seconds:
                break
        samples: list[float] = []
        clocks: list[float | None] = []
        powers: list[float] = []
        while len(samples) < s.repeats:
            if self.clocks is not None:
                clocks.append(self.clocks.sample())
            samples.append(one(fn))
            if self.clocks is not None and (w := self.clocks.power()) is not None:
                powers.append(w)
            if len(samples) >= s.min_repeats and time.perf_counter() - t_start > s.max_seconds:
                break
        if self.clocks is not None:
            clocks.append(self.clocks.sample())
        med, mn, spread = summarize(samples)
        clock, drop = self.clocks.judge(clocks) if self.clocks is not None else (None, False)
        timing = ("back_to_back" if self.back_to_back else "isolated_events") if self.is_cuda else "host_timer"
        return Timing(median_s=med, min_s=mn, spread=spread, repeats=len(samples), clock_mhz=clock,
                      clock_drop=drop, power_w=statistics.fmean(powers) if powers else None, timing=timing)


@dataclass
class DeviceInfo:
    """Which local device the runners measure and the maya key it is calibrated as."""

    device: torch.device
    gpu_key: str | None  # None: a GPU maya does not know
    device_name: str
    threads: int | None
    software: str
    extras: dict = field(default_factory=dict)


def local_device(gpu: str) -> DeviceInfo:
    """The local device for partition `gpu` ('cpu' or a GPU key); raises if it is not here."""
    from emulator.core.hardware import gpu_key_from_device_name

    sw = f"torch {torch.__version__}"
    if gpu == "cpu":
        from emulator.core.hardware import get_gpu

        return DeviceInfo(torch.device("cpu"), "cpu", get_gpu("cpu").name, torch.get_num_threads(), sw)
    if not torch.cuda.is_available():
        raise DeviceMismatch(f"this machine has no CUDA GPU (torch {torch.__version__}, "
                             "CUDA available: False)")
    for i in range(torch.cuda.device_count()):
        name = torch.cuda.get_device_name(i)
        if gpu_key_from_device_name(name) == gpu:
            sw += f", CUDA {torch.version.cuda}"
            try:
                sw += f", NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"
            except Exception:  # NCCL not built in
                pass
            return DeviceInfo(torch.device("cuda", i), gpu, name, None, sw)
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    raise DeviceMismatch(f"no {gpu!r} GPU on this machine (found: {', '.join(names)})")


class DeviceMismatch(RuntimeError):
    """The partition asked for is not the local device."""
