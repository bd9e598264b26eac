"""The example training scripts run for real on the CPU under `maya profile` (gloo, 1-2 ranks).

This is the ground-truth path: same output layout as `maya emulate`, plus measured durations.
Multi-process, so marked slow; still part of `make test`.
"""


import pyarrow.compute as pc
import pytest

from emulator.launch.profile import run_profile
from emulator.trace.io import read_rank_trace
from tests.paths import REPO

ROOT = REPO
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow

CASES = [
    ("gpt_single.py", 1, ["--steps", "2"]),
    ("ddp.py", 2, ["--steps", "2"]),
    ("fsdp2.py", 2, ["--steps", "2"]),
    ("tp_fsdp2.py", 2, ["--steps", "2", "--tp", "2"]),
    ("pipeline.py", 2, ["--steps", "2"]),
]


@pytest.mark.parametrize("script,world,argv", CASES, ids=[f"{c[0][:-3]}-w{c[1]}" for c in CASES])
def test_example_profiles_on_cpu(tmp_path, script, world, argv):
    out = tmp_path / "out"
    s = run_profile(script=str(EXAMPLES / script), module=None, argv=argv, nproc_per_node=world, out=out)
    assert s.ok and s.complete, s.error
    assert s.mode == "profile" and s.gpu == "cpu" and s.world_size == world
    assert s.iterations_found == 2 and s.ranks_emulated == list(range(world))
    for r in range(world):
        t = read_rank_trace(out, r)
        kernels = t.filter(pc.equal(t.column("kind"), "kernel"))
        assert kernels.num_rows > 50
        assert pc.min(kernels.column("duration_s")).as_py() >= 0  # measured, not null
        if world > 1:
            colls = t.filter(pc.is_in(t.column("kind"), pa_strings(["collective", "p2p"])))
            assert colls.num_rows > 0


def pa_strings(values):
    import pyarrow as pa

    return pa.array(values, type=pa.string())


def test_timing_only_profile_measures_each_iteration_of_every_rank_and_records_nothing(tmp_path):
    out = tmp_path / "out"
    s = run_profile(script=str(EXAMPLES / "ddp.py"), module=None, argv=["--steps", "3"], nproc_per_node=2, out=out,
                    timing_only=True)
    assert s.ok and s.iterations_found == 3, s.error
    per_rank = s.measured_iterations_s
    assert sorted(per_rank) == ["0", "1"]
    assert all(len(v) == 3 and min(v) > 0 for v in per_rank.values())
    assert read_rank_trace(out, 0).num_rows == 0  # nothing recorded: the program ran at its own speed
