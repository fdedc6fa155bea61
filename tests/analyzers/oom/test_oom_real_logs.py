"""The OOM explainer on real text that people pasted (tests/analyzers/oom/oom_logs/real/README.md
names each source): every engine's wording with the cause it implies, read through process and
container prefixes, ANSI colours, HTML escapes and terminal wraps."""

from pathlib import Path

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.oom.log import parse_oom_log
from analyzers.oom.log_text import clean_lines, strip_line

REAL = Path(__file__).parent / "oom_logs" / "real"
GiB, MiB = 1024**3, 1024**2

# file -> (kind of the first finding, numbers it must carry)
CASES = {
    "sglang_mem_fraction_static.log": ("sglang_kv_pool", {}),
    "sglang_alloc_req_slots.log": ("sglang_req_slots", {"available_slots": 1, "requests": 2}),
    "tgi_warmup_prefill_tokens.log": ("tgi_warmup_prefill", {"prefill_tokens": 4096}),
    "tgi_warmup_router.log": ("tgi_warmup_prefill", {"prefill_tokens": 4096}),
    "cublas_alloc_failed.log": ("cublas_alloc_failed", {}),
    "nccl_unhandled_cuda_error_oom.log": ("nccl_oom", {}),
    "vllm_free_memory_startup.log": ("vllm_startup_free_memory", {"free": 7.34 * GiB, "total": 139.72 * GiB}),
    "vllm_free_memory_ansi_ci.log": ("vllm_startup_free_memory", {"free": 1.54 * GiB, "wanted": 19.84 * GiB}),
    "vllm_kv_wrapped_midword.log": (
        "vllm_kv_too_small",
        {"max_model_len": 100000, "kv_needed": 4.26 * GiB, "kv_available": 4.25 * GiB},
    ),
    "vllm_kv_wrapped_at_word.log": ("vllm_kv_too_small", {"max_model_len": 1048576, "max_len_that_fits": 810208}),
    "vllm_kv_compose.log": ("vllm_kv_too_small", {"max_model_len": 128000, "kv_available": 12.64 * GiB}),
    "vllm_kv_models_s.log": ("vllm_kv_too_small", {"max_model_len": 262144, "max_len_that_fits": 34736}),
    "vllm_max_len_v0.log": ("vllm_kv_too_small", {"max_model_len": 4096, "kv_tokens": 3664}),
    "vllm_worker_process_torch_oom.log": ("torch_oom", {"tried_to_allocate": 128 * MiB, "cuda_graph_pools": 46 * MiB}),
    "vllm_worker_determine_blocks.log": ("torch_oom", {"tried_to_allocate": 19.63 * GiB, "free": 17.73 * GiB}),
    "vllm_sampler_warmup_wrapped.log": (
        "torch_oom",
        {"tried_to_allocate": 252 * MiB, "reserved_unallocated": 26.44 * MiB},
    ),
    "vllm_v1_core_torch_oom.log": ("torch_oom", {"tried_to_allocate": 1.16 * GiB, "allocated": 4.81 * GiB}),
    "torch_old_html_escaped.log": ("torch_oom", {"tried_to_allocate": 258 * MiB, "total": 23.54 * GiB}),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_message_is_recognised_with_its_numbers(name):
    kind, numbers = CASES[name]
    findings = parse_oom_log((REAL / name).read_text())
    kinds = [f.kind for f in findings]
    assert kind in kinds, kinds
    f = findings[kinds.index(kind)]
    for key, value in numbers.items():
        assert f.numbers[key] == pytest.approx(value, rel=1e-3), (key, f.numbers)
    assert f.explanation and f.fixes


def test_every_real_oom_file_has_a_case():
    listed = {
        line.split("|")[1].strip()
        for line in (REAL / "README.md").read_text().splitlines()
        if line.startswith("| ") and line.split("|")[1].strip().endswith(".log")
    }
    on_disk = {p.name for p in REAL.glob("*.log")}
    assert listed == on_disk
    not_oom = {"nccl_unhandled_cuda_error_plain.log", "journald_apiserver_prefix.log", "vllm_worker_rank_prefix.log"}
    assert set(CASES) == on_disk - not_oom


def test_the_causes_differ_by_engine():
    sampler = parse_oom_log((REAL / "vllm_sampler_warmup_wrapped.log").read_text())
    assert {"vllm_sampler_warmup", "torch_oom"} <= {f.kind for f in sampler}
    free = parse_oom_log((REAL / "vllm_free_memory_startup.log").read_text())[0]
    assert free.numbers["held_by_others"] == pytest.approx((139.72 - 7.34) * GiB)
    assert "--gpu-memory-utilization <= 0.03" in free.fixes[1]
    sgl = parse_oom_log((REAL / "sglang_mem_fraction_static.log").read_text())[0]
    assert "raise --mem-fraction-static" in sgl.fixes[0]
    slots = parse_oom_log((REAL / "sglang_alloc_req_slots.log").read_text())[0]
    assert "--max-running-requests" in slots.fixes[0]
    worker = parse_oom_log((REAL / "vllm_worker_process_torch_oom.log").read_text())[0]
    assert worker.numbers["total"] == pytest.approx(79.33 * GiB)


def test_an_unhandled_cuda_error_alone_is_not_called_an_oom():
    with pytest.raises(DiagnosisError, match="not an OOM message I know"):
        parse_oom_log((REAL / "nccl_unhandled_cuda_error_plain.log").read_text())


def test_prefixes_colours_and_escapes_are_stripped():
    j = clean_lines((REAL / "journald_apiserver_prefix.log").read_text())
    assert j[0].startswith('File "/opt/vllm/lib') or j[0].lstrip().startswith('File "/opt/vllm/lib'), j[0]
    w = clean_lines((REAL / "vllm_worker_rank_prefix.log").read_text())
    assert w[1].strip() == "self.model_runner.capture_model()", w[1]
    ci = clean_lines((REAL / "vllm_free_memory_ansi_ci.log").read_text())[0]
    assert "^[" not in ci and "EngineCore" not in ci and ci.lstrip("> ").startswith("ValueError: Free memory"), ci
    assert strip_line("vllm-1  | (EngineCore pid=98) ValueError: x") == "ValueError: x"
    assert (
        strip_line("[rank7]: torch.distributed.DistBackendError: NCCL error")
        == "torch.distributed.DistBackendError: NCCL error"
    )
