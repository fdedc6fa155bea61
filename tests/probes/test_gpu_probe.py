"""gpu probe: driven against a recorded NVML response set (no GPU here), the real pynvml's
"cannot run" path on this machine, and a real GPU where one is lent (marked gpu)."""

import os

import pytest
from fake_nvml import FakeNvml

from probes.base import ProbeContext, ProbeUnavailable
from probes.gpu import GpuProbe, decode_throttle

DATA = os.path.join(os.path.dirname(__file__), "data", "nvml_2xh100.json")


def test_recorded_response_set_gives_decoded_rows(tmp_path):
    nv = FakeNvml(DATA)
    probe = GpuProbe(ProbeContext(out_dir=tmp_path), nvml=nv)
    probe.check()
    first, second = probe.sample(), probe.sample()
    g0, g1 = second["gpus"]
    assert g0["name"] == "NVIDIA H100 80GB HBM3" and g0["index"] == 0 and g1["index"] == 1
    assert g0["power_w"] == pytest.approx(699.87) and g0["power_limit_w"] == 700.0  # mW -> W
    assert (g0["util_gpu_pct"], g0["util_mem_pct"]) == (99, 64)
    assert g0["mem_used_bytes"] == 79456894976 and g0["mem_total_bytes"] == 85520809984
    assert (g0["sm_clock_mhz"], g0["mem_clock_mhz"]) == (1755, 2619)
    assert g0["throttle_reasons"] == ["sw_power_cap"]
    assert g1["throttle_reasons"] == ["sw_thermal_slowdown", "hw_thermal_slowdown"] and g1["temp_c"] == 88
    assert (g0["pcie_tx_kb_s"], g0["pcie_rx_kb_s"]) == (4096, 512)
    assert g1["pcie_tx_kb_s"] is None and g1["nvlink_tx_bytes_s"] is None  # NotSupported -> null
    assert first["gpus"][0]["nvlink_tx_bytes_s"] is None  # needs two readings
    dt = second["t"] - first["t"]
    assert g0["nvlink_tx_bytes_s"] == pytest.approx(976562 * 1024 / dt, rel=1e-3)
    assert first["xid_events"] == [] and second["xid_events"] == [{"gpu": 1, "xid": 79}]
    probe.close()
    assert nv.shutdown


def test_no_driver_is_a_one_line_unavailable(tmp_path):
    probe = GpuProbe(ProbeContext(out_dir=tmp_path), nvml=FakeNvml(DATA, missing_library=True))
    with pytest.raises(ProbeUnavailable, match="no NVIDIA driver"):
        probe.check()


def test_real_pynvml_on_this_machine(tmp_path):
    import torch

    probe = GpuProbe(ProbeContext(out_dir=tmp_path))
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible; covered by the gpu-marked test")
    with pytest.raises(ProbeUnavailable) as exc:
        probe.check()
    assert "\n" not in str(exc.value)


def test_throttle_decoding():
    assert decode_throttle(0) == []
    assert decode_throttle(0x1 | 0x8) == ["gpu_idle", "hw_slowdown"]
    assert decode_throttle(0x10000) == ["unknown_0x10000"]


@pytest.mark.gpu
def test_real_gpu(tmp_path):
    probe = GpuProbe(ProbeContext(out_dir=tmp_path))
    probe.check()
    probe.sample()
    row = probe.sample()
    probe.close()
    g = row["gpus"][0]
    assert g["mem_total_bytes"] > 0 and 0 <= g["util_gpu_pct"] <= 100 and g["power_w"] > 1


def test_recorder_output_replays_into_the_same_rows(tmp_path):
    """probes/nvml_record.py writes what fake_nvml replays: record from the replay, replay the record."""
    import json

    from probes.nvml_record import record

    recorded = record(samples=2, interval_s=0.0, nv=FakeNvml(DATA))
    path = tmp_path / "rec.json"
    path.write_text(json.dumps(recorded))
    rows = []
    for source in (DATA, path):
        probe = GpuProbe(ProbeContext(out_dir=tmp_path), nvml=FakeNvml(source))
        probe.check()
        rows.append([probe.sample() for _ in range(2)])
    strip = lambda rs: [[{k: v for k, v in g.items() if not k.startswith("nvlink")} for g in r["gpus"]] for r in rs]
    assert strip(rows[0]) == strip(rows[1])
    assert [r["xid_events"] for r in rows[0]] == [r["xid_events"] for r in rows[1]]
