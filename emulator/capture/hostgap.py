"""Pricing the emulator's own host cost, so that a host gap is the program's time and not the emulator's.

The recorder times each gap as process CPU time and leaves out the emulator work it can see
(`Recorder._gap`). What it cannot time from inside is priced here, per call, by loops of tiny
device ops run before the program and again after it, and charged to every gap
(`Recorder.set_prices` / `Recorder.reprice`). The prediction side (`emulator.hosttime`) then turns
the program's gaps into the target's host time.
"""

from __future__ import annotations

import torch


class HostGapPricing:
    """The prices of one rank's recorder: measured at `start`, again at the end, their mean charged."""

    def __init__(self, recorder, policy: str):
        self.recorder = recorder
        self.policy = policy
        self.charged: dict = {}  # the prices every gap is charged (RankSummary.host_gap_baseline_s)
        self.samples: list[dict] = []  # each measurement (RankSummary.host_gap_price_samples)

    def start(self, calls: int = 400, rounds: int = 5) -> dict:
        """Measure the emulator's own per-call cost that the recorder cannot see, and subtract it from gaps.

        Loops of tiny device ops with no program work between calls record, as host gaps, what
        reaching the recorder costs on this machine. Four prices, each loop measured with the
        prices found before it already subtracted:
        - `device_query`: C++ asking a fake tensor for its device (a crossing into Python that a
          real tensor answers in C++): `get_device()` four times per op against none;
        - `crossing`: one more entry into the recording mode (torch's C++ -> Python crossing and
          back), paid by unrecorded calls too (views, detach): three views per op against none;
        - `module_call`: what the module tracker's global hooks add to an `nn.Module` call beyond their
          own timed bodies (torch's slow call path, which a native run without global hooks skips):
          six nested module calls per op with the hooks in place, less the same without them;
        - `forward`: the rest of a recorded call on the program's thread with autograd on
          (fake-tensor handling, building the graph);
        - `backward`: the same on autograd's backward thread (the engine handing each node to the
          fake device).
        The two per-crossing prices are differences of two loops; they are measured in `rounds`
        interleaved pairs and the median difference kept, because a shared machine's speed drifts
        between two loops run one after the other. A real GPU host pays a launch cost instead, which
        the simulator adds per call.
        The loops leave no rows, op hash or memory peak behind.
        """
        rec = self.recorder
        prices = self._measure(calls, rounds)
        rec.set_prices(prices)
        rec.gap_parts = []
        if rec.memory is not None:
            rec.memory.reset_peak()
        self.charged = prices
        self.samples = [prices]
        return prices

    def again_at_the_end(self, calls: int = 400, rounds: int = 5) -> dict:
        """Measure the prices again after the program and charge every gap their mean.

        Why: the prices are a large share of each raw gap (tens of us against a program's few us
        per op), and a shared machine's speed drifts by 2x over minutes; prices measured only at the
        start, in a fast or a slow moment, inflate or deflate every gap of the run. The same
        before/after mean as the host-speed measurement they are compared with."""
        rec = self.recorder
        with rec:
            end = self._measure(calls, rounds)
        samples = [*self.samples, end]
        mean = {k: sum(p[k] for p in samples) / len(samples) for k in end}
        rec.set_prices(mean)
        rec.reprice()
        self.charged = mean
        self.samples = samples
        return mean

    def _measure(self, calls: int, rounds: int) -> dict:
        rec = self.recorder
        point = rec.rows.checkpoint()
        parts = len(rec.gap_parts)
        mem = rec.memory
        peaks = (mem.peaks(), mem.ooms) if mem is not None else None
        before = rec.prices()
        rec.set_prices({"device_query": 0.0, "crossing": 0.0, "module_call": 0.0, "forward": 0.0, "backward": 0.0})
        gaps = rec.rows.cols["host_gap_s"]
        x = torch.empty(256, device="cuda" if self.policy == "emulate" else "cpu")
        per_round = max(calls // rounds, 30)

        def loop(body, n: int = calls) -> float:
            start = len(gaps)
            for _ in range(n):
                body()
            return _steady_median(gaps[start:], n)

        def extra_cost(plain, more, times: int) -> float:
            diffs = sorted(loop(more, per_round) - loop(plain, per_round) for _ in range(rounds))
            return max(diffs[len(diffs) // 2], 0.0) / times

        try:
            with torch.enable_grad():
                add = lambda: torch.add(x, x)  # noqa: E731
                if self.policy == "emulate":  # CPU tensors answer device queries in C++
                    # so do fake tensors the signature cache knows (x, after the first add); q never
                    # enters an op, so its device is asked in Python, as for the tensors that still do
                    q = torch.empty(4, device="cuda")
                    rec.device_query_cost = extra_cost(add, lambda: (q.get_device(), q.get_device(), q.get_device(),
                                                                     q.get_device(), torch.add(x, x)), 4)
                rec.crossing_cost = extra_cost(add, lambda: torch.add(x.view(-1).view(16, 16).view(256), x), 3)
                rec.module_call_cost = self._module_call_cost(extra_cost, add, x)
                w = torch.empty(256, device=x.device, requires_grad=True)
                chain = [w]
                forward = loop(lambda: chain.append(chain[-1] * 1.5))
                cols = rec.rows.cols
                start = len(gaps)
                chain[-1].sum().backward()
                backward = [g for g, ph, op in zip(gaps[start:], cols["phase"][start:], cols["op"][start:],
                                                   strict=True) if ph == "backward" and op == "aten::mul"]
                chain.clear()
            return {"device_query": rec.device_query_cost, "crossing": rec.crossing_cost,
                    "module_call": rec.module_call_cost, "forward": forward,
                    "backward": _steady_median(backward, calls)}
        finally:
            rec.set_prices(before)
            rec.rows.rollback(point)
            del rec.gap_parts[parts:]
            if peaks is not None:  # the loops' tensors are the emulator's, not the program's
                mem.restore_peaks(*peaks[0])
                mem.ooms = peaks[1]

    def _module_call_cost(self, extra_cost, add, x) -> float:
        """The emulator's share of one module call: six nested calls per op timed with the tracker's
        hooks in place and again without them (the native call, which the program pays), the difference
        per call. The hooks' bodies are already left out of both by the tracker's own timer."""
        nest = torch.nn.Identity()
        for _ in range(5):
            nest = _Wrap(nest)
        nested = lambda: torch.add(nest(x), x)  # noqa: E731
        tracked = extra_cost(add, nested, 6)
        tracker = self.recorder.tracker
        tracker.pause()
        try:
            native = extra_cost(add, nested, 6)
        finally:
            tracker.resume()
        return max(tracked - native, 0.0)


class _Wrap(torch.nn.Module):
    """A module whose forward only calls its child: a module call with no op in it."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, y):
        return self.inner(y)


def _steady_median(gaps: list[float], calls: int) -> float:
    """Median of a calibration loop's gaps after its first third (warm-up, the fast path kicking in)."""
    steady = sorted(gaps[calls // 3:calls])
    return steady[len(steady) // 2] if steady else 0.0
