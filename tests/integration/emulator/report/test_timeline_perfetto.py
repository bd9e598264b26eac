"""The timeline of a real emulated run loads in Perfetto: every lane's slices nest, counters are numeric,
and Perfetto's own trace processor reads the streams, the host lane and the memory track back."""

import glob
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from emulator.launch.emulate import run_emulation
from emulator.pipeline import predict_from_trace
from emulator.report.timeline import HOST_TID
from tests.programs.harness import PROGRAMS


@pytest.fixture(scope="module")
def timeline(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tl") / "out"
    summary = run_emulation(script=str(PROGRAMS / "tiny_train.py"), module=None, argv=["--steps", "3"], gpu="h100",
                            out=out)
    assert summary.ok, summary.error
    predict_from_trace(out, roofline_only=True)
    return out / "timeline.json"


def test_every_lane_nests_and_counters_are_numbers(timeline):
    """Perfetto drops or re-parents slices on one thread that overlap without nesting."""
    ev = json.loads(timeline.read_text())["traceEvents"]
    lanes = defaultdict(list)
    for e in ev:
        if e["ph"] == "X":
            assert isinstance(e["ts"], int | float) and e["dur"] >= 0
            lanes[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    assert (0, HOST_TID) in lanes and (0, 0) in lanes
    for lane, spans in lanes.items():
        spans.sort()
        for (s0, e0), (s1, e1) in zip(spans, spans[1:], strict=False):
            assert s1 >= e0 - 1e-3 or e1 <= e0 + 1e-3, f"{lane}: {s0}-{e0} and {s1}-{e1} overlap"
    counters = [e for e in ev if e["ph"] == "C"]
    assert counters and all(isinstance(v, int | float) for e in counters for v in e["args"].values())


def _trace_processor_shell() -> str | None:
    """Perfetto's trace_processor_shell: named by PERFETTO_TRACE_PROCESSOR, on PATH, or in the perfetto
    package's own download cache (it downloads the binary on first use, which needs the network)."""
    cached = sorted(glob.glob(os.path.expanduser("~/.local/share/perfetto/prebuilts/trace_processor_shell*")))
    for candidate in (os.environ.get("PERFETTO_TRACE_PROCESSOR"), shutil.which("trace_processor_shell"),
                      *[c for c in cached if not c.endswith(".tmp")]):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def test_perfettos_trace_processor_reads_streams_host_lane_and_memory(timeline):
    tp_mod = pytest.importorskip("perfetto.trace_processor")
    shell = _trace_processor_shell()
    if shell is None:
        pytest.skip("perfetto's trace_processor_shell is not here and cannot be downloaded without the network; "
                    "set PERFETTO_TRACE_PROCESSOR to one")
    tp = tp_mod.TraceProcessor(trace=str(timeline), config=tp_mod.TraceProcessorConfig(bin_path=shell))
    try:
        threads = {r.name for r in tp.query("select name from thread where name is not null")}
        assert "host (python)" in threads and "stream 0" in threads
        n_kernels = next(iter(tp.query("select count(*) as n from slice where name = 'aten::mm'"))).n
        assert n_kernels > 0
        mem = list(tp.query("select max(value) as peak from counter join counter_track t on counter.track_id = t.id "
                            "where t.name like '%allocated%'"))
        assert mem and mem[0].peak > 0
    finally:
        tp.close()
