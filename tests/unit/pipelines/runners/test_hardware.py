"""Hardware inventory: NVML facts when there is a driver, a clear 'unavailable' when there is not."""

import types

import pynvml
import pytest

from pipelines.runners import hardware


def test_no_nvml_is_recorded_as_unavailable_not_a_crash(monkeypatch):
    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    inv = hardware.inventory("cpu")
    assert inv["nvml"]["available"] is False and "NVML unavailable" in inv["nvml"]["reason"]
    assert inv["cpu"]["usable_cores"] >= 1 and inv["cpu"]["torch_threads"] >= 1
    # the host speed predictions for this node's GPUs scale emulated host gaps by (emulator.core.hostspeed)
    from emulator.core.hostspeed import WORKLOAD

    assert inv["cpu"]["host_speed"]["workload"] == WORKLOAD and inv["cpu"]["host_speed"]["s_per_op"] > 0


@pytest.fixture
def two_h100s(monkeypatch):
    """The pynvml calls the inventory makes, answering like a 2-GPU NVLink node (an API double, not data)."""
    class Err(pynvml.NVMLError):
        def __init__(self):
            self.value = pynvml.NVML_ERROR_INVALID_ARGUMENT

    calls = dict(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlSystemGetCudaDriverVersion=lambda: 12080, nvmlSystemGetDriverVersion=lambda: "570.1",
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: "NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}", nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(
            total=85520809984), nvmlDeviceGetClockInfo=lambda h, c: 1980, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetPowerManagementLimit=lambda h: 700000, nvmlDeviceGetTemperature=lambda h, s: 40,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: pynvml.nvmlClocksThrottleReasonSwPowerCap,
        nvmlDeviceGetTopologyCommonAncestor=lambda a, b: 10,
    )

    def link_state(h, link):
        if link >= 2:
            raise Err()
        return pynvml.NVML_FEATURE_ENABLED

    calls["nvmlDeviceGetNvLinkState"] = link_state
    calls["nvmlDeviceGetNvLinkRemotePciInfo"] = lambda h, link: types.SimpleNamespace(busId=b"0000:1B:00.0")
    for name, fn in calls.items():
        monkeypatch.setattr(pynvml, name, fn, raising=False)


def test_nvml_inventory_of_a_gpu_node(two_h100s):
    inv = hardware.inventory("h100")
    nv = inv["nvml"]
    assert nv["available"] and nv["count"] == 2 and nv["cuda_driver_version"] == "12.8"
    d = nv["devices"][0]
    assert d["name"] == "NVIDIA H100 80GB HBM3" and d["power_limit_w"] == 700 and d["sm_clock_max_mhz"] == 1980
    assert d["throttle_reasons"] == ["SwPowerCap"] and len(d["nvlink"]) == 2 and d["p2p"] == {"1": 10}
    assert inv["matching_devices"] == [0, 1]
