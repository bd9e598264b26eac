"""A variant's capacity reaches the emulated device: a job that fits on the 96 GB part is not an OOM there."""

from emulator.core.variants import variant_from_table
from emulator.launch.emulate import run_emulation
from emulator.pipeline import predict_from_trace
from emulator.trace.io import read_summary
from emulator.trace.layout import rank_log_path
from tests.programs.harness import PROGRAMS


def test_the_emulated_device_has_the_variants_memory_and_name(tmp_path):
    program = str(PROGRAMS / "capacity.py")
    stock = run_emulation(script=program, module=None, argv=["88"], gpu="h100", out=tmp_path / "stock")
    assert stock.oom
    variant = variant_from_table({"base": "h100-96gb", "name": "H100 SXM 96GB 500W", "power_limit_w": 500})
    big = run_emulation(script=program, module=None, argv=["88"], gpu=variant.key, out=tmp_path / "big")
    assert big.ok and not big.oom, big.error
    printed = rank_log_path(tmp_path / "big", 0).read_text()
    assert "name=H100 SXM 96GB 500W" in printed and f"total_memory={variant.memory_bytes}" in printed
    assert read_summary(tmp_path / "big").gpu_spec["power_limit_w"] == 500
    # a later `maya simulate OUT` in another process finds the variant from emulation.json
    from emulator.core import hardware

    del hardware.GPUS[variant.key]
    pred = predict_from_trace(tmp_path / "big", roofline_only=True)
    assert pred.gpu == variant.key and pred.gpu_variant["power_limit_w"] == 500 and not pred.oom


def test_predict_with_a_cluster_files_gpu_table_emulates_on_the_variant(tmp_path):
    """`maya predict --cluster` with a `[gpu]` table: the job that is an OOM on the stock part fits."""
    import json
    import subprocess
    import sys

    cluster = tmp_path / "cluster.toml"
    cluster.write_text('nnodes = 1\n\n[gpu]\nbase = "h100-96gb"\nname = "H100 96GB rented"\n')
    res = subprocess.run([sys.executable, "-m", "emulator.cli", "predict", "--cluster", str(cluster), "--roofline-only",
                          "--out", str(tmp_path / "out"), str(PROGRAMS / "capacity.py"), "88"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    pred = json.loads((tmp_path / "out" / "prediction.json").read_text())
    assert not pred["oom"] and pred["gpu_variant"]["name"] == "H100 96GB rented"
