"""`llmdiag calibrate` measures this machine into a profile `llmdiag plan` reads back."""

import json
import os
import platform

import pytest
import torch
from typer.testing import CliRunner

from analyzers.plan.calibrate import rank_threads
from analyzers.plan.calibrate.matmul import monotone
from analyzers.plan.profile import PROFILE_SCHEMA, MachineProfile
from llmbench.diag_cli import app


@pytest.mark.slow  # moved out of the default suite (its 10-minute budget); .ci/run runs it
def test_quick_calibration_writes_a_valid_profile(tmp_path):
    out = tmp_path / "machine.json"
    r = CliRunner().invoke(
        app, ["calibrate", "--quick", "--no-comm", "--out", str(out), "--name", "laptop"], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert data["schema_version"] == PROFILE_SCHEMA and data["source"] == "measured" and data["name"] == "laptop"
    profile = MachineProfile.load(out)
    table = profile.matmul
    assert table is not None and table.ms == [1, 16, 256] and table.sizes == [64, 512]
    assert all(t > 0 for row in table.times for t in row)
    # A bigger matmul never costs less (noise on a shared machine is clipped, not believed).
    assert all(table.times[i][j] <= table.times[i + 1][j] for i in range(2) for j in range(2))
    assert profile.attention_decode and profile.attention_prefill and profile.elementwise
    att = profile.attention_prefill_table  # refengine's Attention per head, by prompt length and head dim
    assert att is not None and att.tokens == [32, 128] and att.head_dims == [16, 64]
    assert all(t.attention_prefill_table is not None for t in profile.fewer_threads)
    # Whole and split where the kernel can split here, with the engine's rule for which a call gets.
    from refengine.kernels import cpu_paged_prefill

    if profile.threads >= 2 and cpu_paged_prefill.LIBRARY.available():
        assert att.split_times is not None and att.split_threads == profile.threads
        assert att.min_work_per_thread == cpu_paged_prefill.MIN_WORK_PER_THREAD
    assert all(t.attention_prefill_table.split_times is None for t in profile.fewer_threads if t.threads == 1)
    assert set(profile.measured_points) == {"attention", "elementwise", "layer_overhead", "step_overhead"}
    assert profile.layer_overhead is not None and profile.layer_overhead.hi >= 1
    assert any("not measured (--no-comm)" in a for a in profile.assumptions)
    # Measured again at the threads each of 2 or 4 ranks sharing these cores gets (refengine's split).
    assert profile.cores == os.cpu_count() and profile.threads == torch.get_num_threads()
    assert [t.threads for t in profile.fewer_threads] == rank_threads(profile.cores, profile.threads, (2, 4))
    assert f"({profile.threads} threads" in " ".join(r.output.split())
    assert profile.host == platform.node()  # whose machine: `--profile` tells this one from another
    older = {k: v for k, v in data.items() if k != "host"}  # written before the field existed
    assert MachineProfile.from_dict(older).host == platform.node()


def test_monotone_lowers_a_disturbed_small_shape_to_the_larger_ones_time():
    assert monotone([[5.0, 2.0], [1.0, 3.0]]) == [[1.0, 2.0], [1.0, 3.0]]


def test_calibrate_refuses_a_folder_that_does_not_exist(tmp_path):
    r = CliRunner().invoke(app, ["calibrate", "--quick", "--no-comm", "--out", str(tmp_path / "no" / "p.json")])
    assert r.exit_code == 2 and "does not exist" in r.output


@pytest.mark.slow
def test_serve_fits_the_overheads_to_a_sweep_of_the_bundled_server(tmp_path):
    """About a minute: a quick calibration, then a real two-level sweep of the embedded tiny-test."""
    out = tmp_path / "served.json"
    r = CliRunner().invoke(
        app, ["calibrate", "--quick", "--no-comm", "--serve", "--out", str(out)], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 0, r.output
    profile = MachineProfile.load(out)
    assert profile.source == "fitted" and profile.compute_scale == 1.0
    assert "fitted to run" in profile.assumptions[-1] and "fitted to the served sweep" in r.output
    # Two prompt lengths, one user at a time at each: the request overhead's prompt term is measured
    # from them (what a request waits before the engine sees it grows with its prompt).
    assert "c1-in128-out32" in profile.assumptions[-1] and "c1-in512-out32" in profile.assumptions[-1]
    assert "by running requests and prompt tokens" in profile.assumptions[-1]


def test_calibrate_on_cuda_without_a_gpu_is_one_clear_line(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible; the gpu-marked test measures on it")
    r = CliRunner().invoke(
        app, ["calibrate", "--quick", "--device", "cuda", "--out", str(tmp_path / "p.json")], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 2 and "no CUDA GPU is visible" in r.output and "--device cpu" in r.output
    assert not (tmp_path / "p.json").exists()


@pytest.mark.gpu
def test_quick_calibration_on_a_gpu_measures_there(tmp_path):
    """Where a GPU is lent: refengine's layers measured on it in bfloat16, one device per rank."""
    out = tmp_path / "gpu.json"
    r = CliRunner().invoke(app, ["calibrate", "--quick", "--device", "cuda", "--out", str(out)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    profile = MachineProfile.load(out)
    assert profile.dtype_bytes == 2 and profile.threads == 0 and profile.cores == 0 and not profile.fewer_threads
    assert torch.cuda.get_device_name() in profile.assumptions[0]
    # 2 x 256 x 512 x 512 FLOP at a launch-bound 30 us is 4.5 TFLOP/s: beyond any CPU's 512-wide matmul.
    assert profile.roofline.peak_flops > 1e12
    if torch.cuda.device_count() < 2:
        assert "GPU visible, NCCL needs 2" in r.output
