"""A cheap stand-in for `maya predict` with a known optimum and a memory wall, for the search tests."""

from emulator.search.trial import base_row

SPACE = """
[knobs]
tp = { values = [1, 2, 4, 8] }
micro_batch = { values = [1, 2, 4, 8], memory = "increasing" }
checkpoint = { type = "bool", memory = "decreasing", time = "increasing" }
gpu = { values = ["a100-80gb", "h100"] }

[constants]
global_batch = 64

[derived]
dp = "gpus // tp"

[constraints]
batch = "global_batch % (dp * micro_batch) == 0"

[program]
args = ["--tp", "{tp}", "--micro-batch", "{micro_batch}", { if = "checkpoint", args = ["--checkpoint"] }]

[cluster]
gpu = "{gpu}"
"""


class FakeEvaluator:
    """Time falls with micro-batch and rises with TP beyond 2; memory = micro_batch / tp, halved by checkpointing."""

    def __init__(self, crash_on=None, interrupt_after=None, host_band=None):
        self.calls = []
        self.crash_on, self.interrupt_after = crash_on, interrupt_after
        self.host_band = host_band  # every step host-bound, with this relative range (prediction.json's band)

    def __call__(self, spec, predictors):
        if self.interrupt_after is not None and len(self.calls) >= self.interrupt_after:
            raise KeyboardInterrupt
        a = spec.plan.argv
        tp, mb, ck = int(a[1]), int(a[3]), "--checkpoint" in a
        self.calls.append((tp, mb, ck, spec.plan.gpu))
        row = base_row(spec, spec.trial_key(predictors), predictors)
        if self.crash_on == (tp, mb):
            row.update(status="crash", reason="ZeroDivisionError: boom", traceback_path="/tmp/tb.txt")
            return row
        if mb / tp / (2 if ck else 1) > 2:
            row.update(status="oom", reason="out of memory on rank(s) [0]")
            return row
        t = 1.0 + abs(tp - 2) * 0.3 + 1.0 / mb + (0.4 if ck else 0.0) + (0.0 if spec.plan.gpu == "h100" else 0.5)
        row.update(status="ok", iteration_time_s=t, cost_per_iteration_usd=t * 8 * 2.0 / 3600,
                   cost_per_million_tokens_usd=t * 8 * 2.0 / 3600 / 0.065536, world_size=8, trial_wall_s=0.01,
                   bound_by="host" if mb == 1 else "compute")
        if self.host_band:
            row.update(bound_by="host", iteration_time_low_s=t * (1 - self.host_band),
                       iteration_time_high_s=t * (1 + self.host_band))
        return row


def fake_versions(gpu, roofline_only):
    return {"kernels": f"fake-{gpu} v1", "collectives": f"fake-{gpu} v1"}
