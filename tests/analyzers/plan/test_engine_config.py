"""The engine a prediction simulates: the server's flags, --what-if, and the engine's own KV sizing."""

import pytest
import torch

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import resolve_model
from analyzers.plan.engine_config import engine_args_from_flags, parse_what_if, resolve_engine, with_changes
from refengine.distributed.worker import kv_blocks_for
from refengine.model.hf_config import load_model_config
from refengine.model.tiny import resolve_model as model_dir
from refengine.parallel.layout import ParallelConfig


def test_what_if_values_take_each_fields_type():
    assert parse_what_if("max_num_seqs=64, enable_chunked_prefill=false,watermark=0.05") == {
        "max_num_seqs": 64,
        "enable_chunked_prefill": False,
        "watermark": 0.05,
    }
    assert parse_what_if("max-num-batched-tokens=512,scheduling_policy=sjf") == {
        "max_num_batched_tokens": 512,
        "scheduling_policy": "sjf",
    }
    for bad in ("", "max_num_seqs", "model=tiny", "nope=1", "max_num_seqs=1.5", "enable_prefix_caching=2x"):
        with pytest.raises(DiagnosisError):
            parse_what_if(bad)
    args = with_changes(engine_args_from_flags("tiny-test", []), parse_what_if("scheduling_policy=random"))
    with pytest.raises(DiagnosisError, match="scheduling_policy"):
        resolve_engine(args, resolve_model("tiny-test"), 4, "cpu")


@pytest.mark.parametrize(
    "flags",
    [
        [],
        ["--kv-cache-memory-bytes", "1000000", "--block-size", "32"],
        ["--tensor-parallel-size", "2", "--kv-cache-memory-bytes", "3000000"],
    ],
)
def test_kv_blocks_follow_the_engines_own_rule(flags):
    args = engine_args_from_flags("tiny-test", ["--max-model-len", "256", *flags])
    setup = resolve_engine(args, resolve_model("tiny-test"), kv_bytes_per_element=4, device_type="cpu")
    engine_blocks = kv_blocks_for(
        args, load_model_config(model_dir("tiny-test")), ParallelConfig.from_engine_args(args, "cpu"), torch.float32
    )
    assert setup.cache.num_blocks == engine_blocks
    assert setup.scheduler.max_model_len == 256 and setup.tp == args.tensor_parallel_size


def test_recorded_blocks_win_and_a_cache_too_small_is_refused():
    args = engine_args_from_flags("tiny-test", ["--max-model-len", "256"])
    assert resolve_engine(args, resolve_model("tiny-test"), 4, "cpu", recorded_blocks=40).cache.num_blocks == 40
    with pytest.raises(DiagnosisError, match="does not hold one request"):
        resolve_engine(args, resolve_model("tiny-test"), 4, "cpu", recorded_blocks=3)


@pytest.mark.parametrize(
    "flags, device, depth, note",
    [
        (["--pipeline-parallel-size", "2"], "cpu", 1, False),  # the stages take turns on a CPU host
        (["--pipeline-parallel-size", "2"], "cuda", 2, False),  # the batch queue
        (["--pipeline-parallel-size", "2", "--pipeline-micro-batches", "2"], "cpu", 2, True),
        (["--pipeline-parallel-size", "2", "--pipeline-schedule", "batch-queue"], "cpu", 2, False),
        ([], "cuda", 1, False),
    ],
)
def test_the_simulated_pipeline_runs_the_engines_own_schedule(flags, device, depth, note):
    args = engine_args_from_flags("tiny-test", flags)
    setup = resolve_engine(args, resolve_model("tiny-test"), 4, device)
    assert setup.batches_in_flight == depth
    assert any("simulated as the batch queue" in n for n in setup.notes) == note
