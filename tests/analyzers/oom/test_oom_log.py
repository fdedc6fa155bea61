"""OOM log parsing on samples of each wording (tests/analyzers/oom/oom_logs/) and on garbage."""

from pathlib import Path

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.oom.log import EXPANDABLE, parse_oom_log

LOGS = Path(__file__).parent / "oom_logs"
GiB, MiB = 1024**3, 1024**2


def parse(name):
    return parse_oom_log((LOGS / name).read_text())


def test_current_pytorch_wording_with_fragmentation():
    [f] = parse("torch_new.log")
    assert f.kind == "torch_oom" and "2.1" in f.wording
    n = f.numbers
    assert n["tried_to_allocate"] == 2 * GiB and n["total"] == pytest.approx(79.15 * GiB)
    assert n["free"] == pytest.approx(1.23 * GiB) and n["allocated"] == pytest.approx(70.12 * GiB)
    assert n["reserved_unallocated"] == pytest.approx(6.54 * GiB)
    assert n["non_pytorch"] == pytest.approx((77.91 - 70.12 - 6.54) * GiB)
    assert any(line.startswith("fragmentation") for line in f.explanation)
    assert any(EXPANDABLE in fix for fix in f.fixes)


def test_pytorch_2_1_spelling_and_other_processes():
    [f] = parse("torch_new_other_process.log")
    assert f.numbers["tried_to_allocate"] == 512 * MiB
    assert f.numbers["other_processes"] == pytest.approx(9.80 * GiB)
    assert any("other processes hold 9.80 GiB" in line for line in f.explanation)
    assert not any(line.startswith("fragmentation") for line in f.explanation)  # 124 MiB cached < 512 MiB asked


def test_older_pytorch_wording_full_card():
    [f] = parse("torch_old.log")
    assert "< 2.1" in f.wording
    n = f.numbers
    assert n["tried_to_allocate"] == 20 * MiB and n["total"] == pytest.approx(15.78 * GiB)
    assert n["reserved_unallocated"] == pytest.approx((14.75 - 14.56) * GiB)
    assert any("live tensors fill 92%" in line for line in f.explanation)
    assert not any(line.startswith("fragmentation") for line in f.explanation)


def test_pytorch_1x_cached_wording():
    [f] = parse("torch_1x_cached.log")
    assert "cached" in f.wording
    assert f.numbers["reserved_unallocated"] == pytest.approx((8.90 - 6.12) * GiB)
    assert any(line.startswith("fragmentation") for line in f.explanation)


def test_vllm_max_seq_len_larger_than_kv_cache():
    [f] = parse("vllm_max_len.log")
    assert f.kind == "vllm_kv_too_small"
    assert f.numbers["max_model_len"] == 32768 and f.numbers["kv_tokens"] == 21744
    assert "max_model_len <= 21,744" in f.fixes[0]


def test_vllm_v1_kv_cache_needed_wording():
    [f] = parse("vllm_v1_kv.log")
    assert f.kind == "vllm_kv_too_small" and "v1" in f.wording
    assert f.numbers["kv_needed"] == pytest.approx(5.62 * GiB)
    assert f.numbers["kv_available"] == pytest.approx(4.50 * GiB)
    assert f.numbers["max_len_that_fits"] == 32768


def test_vllm_no_available_memory_for_cache_blocks():
    [f] = parse("vllm_no_blocks.log")
    assert f.kind == "vllm_no_kv_blocks"
    assert any("weights/plan problem" in line for line in f.explanation)


def test_vllm_preemption_warning_is_not_an_oom():
    [f] = parse("vllm_preemption.log")
    assert f.kind == "vllm_preemption" and f.numbers["cumulative_preemptions"] == 51
    assert f.explanation[0].startswith("not an OOM")


def test_raw_cuda_error():
    [f] = parse("cuda_error.log")
    assert f.kind == "cuda_error_oom"


def test_several_messages_in_one_log():
    text = (LOGS / "vllm_max_len.log").read_text() + (LOGS / "torch_old.log").read_text()
    assert sorted(f.kind for f in parse_oom_log(text)) == ["torch_oom", "vllm_kv_too_small"]


@pytest.mark.parametrize("text", [(LOGS / "garbage.log").read_text(), "", "CUDA out of memory, maybe?"])
def test_garbage_is_not_an_oom_message_i_know(text):
    with pytest.raises(DiagnosisError, match="not an OOM message I know"):
        parse_oom_log(text)


def test_a_vllm_worker_log_whose_cause_is_lines_below_the_first_error():
    """The first error line is "NCCL error ... unhandled cuda error"; the cause, NCCL's "Cuda failure 2
    'out of memory'", comes three lines below under "Last error:", without NCCL's WARN prefix."""
    findings = parse("vllm_worker_nccl_last_error.log")
    assert [f.kind for f in findings] == ["nccl_oom"]
    assert "unhandled cuda error" in findings[0].wording and findings[0].fixes
