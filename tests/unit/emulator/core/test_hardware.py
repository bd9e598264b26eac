"""The GPU table and `maya gpus`: what a user sees when choosing a target."""

import pytest
from typer.testing import CliRunner

from emulator.cli import app
from emulator.core.hardware import UnknownGPUError, get_gpu, gpu_key_from_device_name, known_gpus


def test_required_parts_are_known():
    for key in ("h100", "h200", "a100-80gb", "a100-40gb", "l40s", "b200", "v100", "cpu"):
        assert key in known_gpus()


def test_h100_matches_datasheet():
    h100 = get_gpu("h100")
    assert h100.name == "NVIDIA H100 80GB HBM3"
    assert h100.sm_count == 132 and h100.capability == (9, 0)
    assert h100.peak_for("bfloat16") == pytest.approx(989.4e12)
    assert h100.peak_for("float32", tf32=True) == pytest.approx(494.7e12)


def test_lookup_by_alias_and_reported_name():
    assert get_gpu("H100_SXM").key == "h100"
    assert gpu_key_from_device_name("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert gpu_key_from_device_name("NVIDIA H200") == "h200"


def test_unknown_gpu_lists_known_parts():
    with pytest.raises(UnknownGPUError) as e:
        get_gpu("h900")
    assert "h100" in str(e.value) and "a100-80gb" in str(e.value)


def test_cli_gpus_lists_table():
    result = CliRunner().invoke(app, ["gpus"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "NVIDIA H100 80GB HBM3" in result.output
    bridged = next(line for line in result.output.splitlines() if "a100-80gb-pcie" in line)
    assert "2 GPUs" in bridged  # NVLink bridges pairs of these cards; a wider group crosses PCIe


def test_cli_unknown_gpu_exits_with_list():
    result = CliRunner().invoke(app, ["simulate", "nowhere", "--gpu", "h900"])
    assert result.exit_code == 2
    assert "known parts" in result.output
