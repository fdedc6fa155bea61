"""The step model against hand computations, and the profile's interpolation and fits."""

import dataclasses
import math

import pytest

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import resolve_model
from analyzers.plan.attention_table import AttentionTable
from analyzers.plan.decode_attention import DecodeAttentionCost
from analyzers.plan.profile import CollectiveCost, LinearCost, MachineProfile, MatmulTable, Roofline, ThreadTables
from analyzers.plan.step_model import StepModel, StepShape


def _profile(**kw) -> MachineProfile:
    # 1 TFLOP/s, bandwidth so large memory never binds, no launch cost: a matmul is 2MKN / 1e12 s.
    base = dict(
        name="hand",
        source="published",
        dtype_bytes=2,
        roofline=Roofline(
            peak_flops=1e12, mem_bw_bytes_s=1e30, compute_efficiency=1.0, memory_efficiency=1.0, launch_s=0.0
        ),
        step_overhead=LinearCost(1e-3, 1e-5),
        collective=CollectiveCost(1e-5, 1e9),
        attention_decode=DecodeAttentionCost(0.0, 1e-12),
        attention_prefill=LinearCost(0.0, 1e-12),
        elementwise=LinearCost(0.0, 1e-10),
    )
    base.update(kw)
    return MachineProfile(**base)


def test_decode_step_matches_a_hand_computation():
    shape = resolve_model("tiny-test")  # hidden 64, 2 layers, 4 heads, 2 kv heads, head_dim 16, inter 176, vocab 4096
    step = StepShape(((1, 100), (1, 300)), num_sampled=2)
    cost = StepModel(shape, _profile()).step_cost(step)
    t = 2
    mm = 2 * t * (64 * (64 + 2 * 32) + 64 * 64 + 64 * 352 + 176 * 64) / 1e12
    attention = 1e-12 * 2 * (100 + 300) * 2 * 16
    elementwise = 1e-10 * t * 64
    lm_head = 2 * 2 * 64 * 4096 / 1e12
    overhead = 1e-3 + 2 * 1e-5
    expected = 2 * (mm + attention + elementwise) + lm_head + overhead
    assert cost.total_s == pytest.approx(expected, rel=1e-9)
    assert cost.parts["overhead"] == pytest.approx(overhead)
    assert cost.parts["tp_comm"] == 0.0 and not cost.notes


def test_the_engines_layer_overhead_is_paid_once_per_layer_by_requests():
    """A measured layer overhead (a + b x requests) adds to every layer of every stage, and survives JSON."""
    shape = resolve_model("tiny")  # 8 layers
    step = StepShape(((1, 100),) * 3, num_sampled=3)
    plain = StepModel(shape, _profile()).step_cost(step)
    with_layers = _profile(layer_overhead=LinearCost(2e-5, 1e-6))
    cost = StepModel(shape, with_layers).step_cost(step)
    assert cost.parts["layer_overhead"] == pytest.approx(8 * (2e-5 + 3 * 1e-6))
    assert cost.total_s - plain.total_s == pytest.approx(8 * (2e-5 + 3 * 1e-6))
    assert StepModel(shape, with_layers, pp=2).step_cost(step).parts["layer_overhead"] == pytest.approx(
        cost.parts["layer_overhead"]
    )
    assert MachineProfile.from_dict(with_layers.to_dict()) == with_layers


def test_tensor_parallel_halves_matmuls_and_adds_two_all_reduces_per_layer():
    shape = resolve_model("tiny-test")
    step = StepShape(((8, 8),), num_sampled=1)
    one, two = StepModel(shape, _profile()), StepModel(shape, _profile(), tp=2)
    c1, c2 = one.step_cost(step), two.step_cost(step)
    assert c2.parts["matmul"] == pytest.approx(c1.parts["matmul"] / 2, rel=1e-9)
    # ring all-reduce of 8 tokens x 64 x 2 bytes over 2 ranks: latency + bytes x 2(n-1)/n / bus bandwidth
    ar = 1e-5 + 8 * 64 * 2 * 1.0 / 1e9
    assert c2.parts["tp_comm"] == pytest.approx(2 * 2 * ar)  # two per layer, two layers


def test_pipeline_stage_is_its_share_of_the_layers():
    shape = resolve_model("tiny-test")
    step = StepShape(((1, 10),), num_sampled=1)
    c1 = StepModel(shape, _profile()).step_cost(step)
    c2 = StepModel(shape, _profile(), pp=2).step_cost(step)
    layer = (c1.total_s - c1.parts["lm_head"] - c1.overhead_s) / 2
    assert c2.stage_s == pytest.approx(layer + c2.parts["lm_head"] + c2.parts["pp_send"], rel=1e-9)
    with pytest.raises(DiagnosisError):
        StepModel(shape, _profile(), pp=3)


def test_matmul_table_interpolates_in_log_space_and_says_when_it_extrapolates():
    table = MatmulTable(ms=[1, 100], sizes=[10, 1000], times=[[1e-6, 1e-4], [1e-5, 1e-3]])
    notes: set[str] = set()
    assert table.seconds(1, 10, 10, notes) == pytest.approx(1e-6)
    assert table.seconds(10, 100, 100, notes) == pytest.approx(math.sqrt(1e-6 * 1e-3))  # the grid's middle
    assert not notes
    assert table.seconds(200, 1000, 1000, notes) == pytest.approx(2e-3)  # twice the rows of the edge
    assert any("beyond the measured grid" in n for n in notes)
    for m in range(101, 1000, 7):  # a sweep's thousands of steps: one note, not one a shape
        table.seconds(m, 1000, 2000, notes)
    assert len(notes) == 1, notes


def test_linear_fit_recovers_a_line_and_flags_extrapolation():
    fit = LinearCost.fit([1, 10, 100], [1.1e-3, 2e-3, 11e-3])
    assert fit.fixed_s == pytest.approx(1e-3) and fit.per_unit_s == pytest.approx(1e-4)
    notes: set[str] = set()
    fit.seconds(1000, notes, "x")
    assert notes


def test_profile_round_trips_through_json(tmp_path):
    p = _profile(matmul=MatmulTable(ms=[1, 2], sizes=[4, 8], times=[[1e-6, 2e-6], [2e-6, 3e-6]]))
    p.save(tmp_path / "p.json")
    assert MachineProfile.load(tmp_path / "p.json") == p
    (tmp_path / "bad.json").write_text('{"schema_version": 99}')
    with pytest.raises(DiagnosisError, match="schema"):
        MachineProfile.load(tmp_path / "bad.json")


def test_a_measured_matmul_table_prices_the_layers_and_notes_its_edge():
    # Every matmul costs 1 us inside the grid (M <= 64, size <= 4096): a decode step's four layer matmuls.
    table = MatmulTable(ms=[1, 64], sizes=[16, 4096], times=[[1e-6, 1e-6], [1e-6, 1e-6]])
    profile = _profile(matmul=table, compute_scale=2.0)
    model = StepModel(resolve_model("tiny-test"), profile)
    cost = model.step_cost(StepShape(((1, 50),), num_sampled=1))
    assert cost.parts["matmul"] == pytest.approx(2 * 4 * 1e-6 * 2.0)  # 2 layers x 4 matmuls x scale
    assert cost.parts["lm_head"] == pytest.approx(1e-6 * 2.0)
    assert not cost.notes
    wide = model.step_cost(StepShape(((128, 128),), num_sampled=1))  # 128 tokens: twice the grid's rows
    assert wide.parts["matmul"] == pytest.approx(2 * 4 * 2e-6 * 2.0)
    assert any("beyond the measured grid" in n for n in wide.notes)


def _tables(threads: int, us: float) -> ThreadTables:
    return ThreadTables(
        threads=threads,
        matmul=MatmulTable(ms=[1, 64], sizes=[16, 4096], times=[[us * 1e-6] * 2] * 2),
        attention_decode=DecodeAttentionCost(0.0, 1e-12),
        attention_prefill=LinearCost(0.0, 1e-12),
        elementwise=LinearCost(0.0, 1e-10),
    )


def test_ranks_sharing_a_cpu_host_are_priced_at_their_share_of_its_threads(tmp_path):
    # Measured at 2 threads (1 us a matmul) and again at 1 (3 us): refengine gives each of 2 ranks on a
    # 2-core host one thread, so TP2 and PP2 price their matmuls from the 1-thread table, TP1 from its own.
    two = _tables(2, 1.0)
    profile = _profile(matmul=two.matmul, threads=2, cores=2, fewer_threads=[_tables(1, 3.0)], source="measured")
    profile.save(tmp_path / "p.json")
    assert MachineProfile.load(tmp_path / "p.json") == profile
    shape, step = resolve_model("tiny-test"), StepShape(((8, 8),), num_sampled=1)
    tp1 = StepModel(shape, profile).step_cost(step)
    assert tp1.parts["matmul"] == pytest.approx(2 * 4 * 1e-6) and not tp1.notes
    for tp, pp in ((2, 1), (1, 2)):
        shared = StepModel(shape, profile, tp=tp, pp=pp).step_cost(step)
        assert shared.parts["matmul"] == pytest.approx(2 * 4 * 3e-6)  # both layers, over the stages
        assert not shared.notes
    # A rank with a device of its own (a GPU profile: no cores recorded) keeps the profile's tables.
    gpu = StepModel(shape, dataclasses.replace(profile, cores=0), tp=2).step_cost(step)
    assert gpu.parts["matmul"] == pytest.approx(2 * 4 * 1e-6)
    # Four ranks on 2 cores get 1 thread each as well; 4 ranks on a 16-core host measured at 16 threads only
    # would need 4-thread tables it lacks: priced at 16, and the prediction says so.
    assert StepModel(shape, profile, tp=2, pp=2).step_cost(step).parts["matmul"] == pytest.approx(2 * 4 * 3e-6)
    big = dataclasses.replace(profile, threads=16, cores=16, fewer_threads=[])
    noted = StepModel(shape, big, tp=4).step_cost(step)
    assert any("measured its operators at 16 threads only" in n for n in noted.notes)


def test_a_measured_prefill_attention_table_prices_each_chunk_per_head():
    # Per head: 1 us at 32 tokens (the layer's fixed cost, little else), 10 us at 512, 100 us at 2048, at
    # head dims 16 and 64 alike but 2x at 128. One chunk of 512 at 4 heads: 40 us; two chunks pay the
    # fixed cost once (4 + 2 x (40 - 4) us); a chunk of 256 new tokens over 1,024 reads at sqrt(256 x
    # 1024) = 512; head dim 96 lies between 64 and 128 (log-log); 4,096 tokens is beyond the grid.
    table = AttentionTable(
        tokens=[32, 512, 2048],
        head_dims=[16, 64, 128],
        times=[[1e-6, 1e-6, 2e-6], [10e-6, 10e-6, 20e-6], [100e-6, 100e-6, 200e-6]],
    )
    notes: set[str] = set()
    assert table.seconds(512, 512, 4, 64, notes) == pytest.approx(40e-6)
    assert table.step_seconds([(512, 512), (512, 512)], 4, 64, notes) == pytest.approx(4e-6 + 2 * 36e-6)
    assert table.seconds(256, 1024, 4, 64, notes) == pytest.approx(40e-6)
    assert table.seconds(512, 512, 1, 96) == pytest.approx(10e-6 * 2 ** (math.log(96 / 64) / math.log(2)))
    assert not notes
    assert table.seconds(4096, 4096, 1, 64, notes) == pytest.approx(100e-6 * 4)  # the work, 4x the edge's
    assert any("beyond the measured grid" in n for n in notes)
    # The step model reads the table before the line, per TP rank's heads.
    profile = _profile(attention_prefill_table=table, attention_prefill=LinearCost(1.0, 1.0))
    shape = resolve_model("tiny-test")  # 4 heads, head dim 16
    cost = StepModel(shape, profile, tp=2).step_cost(StepShape(((512, 512),), num_sampled=1))
    assert cost.parts["attention"] == pytest.approx(2 * 2 * 10e-6)  # 2 layers x 2 heads per rank
    with pytest.raises(DiagnosisError):
        AttentionTable(tokens=[32, 16], head_dims=[16, 64], times=[[1e-6, 1e-6], [1e-6, 1e-6]])


def test_a_prefill_call_is_priced_whole_or_split_as_the_engines_rule_gives_it_threads():
    """refengine's kernel splits a call by its whole work (rows x context x heads x head dim): the same
    512-token prompt runs whole for tiny-test (4 heads of 16: 2^24) and split for `tiny` (16 of 64: 2^28),
    so a per-head grid read for both must be the one each call runs at."""
    whole = [[1e-6, 1e-6, 1e-6], [10e-6, 10e-6, 10e-6], [100e-6, 100e-6, 100e-6]]
    split = [[2e-6, 2e-6, 2e-6], [6e-6, 6e-6, 6e-6], [55e-6, 55e-6, 55e-6]]
    table = AttentionTable([32, 512, 2048], [16, 64, 128], whole, split, 2, float(1 << 27))
    assert table.seconds(512, 512, 4, 16) == pytest.approx(4 * 10e-6)  # 2^24 of work: one thread
    assert table.seconds(512, 512, 16, 64) == pytest.approx(16 * 6e-6)  # 2^28: two
    # A step's chunks are one call: two 512-token prompts of 8 heads of 64 (2 x 2^27) split together.
    assert table.step_seconds([(512, 512)], 8, 64) == pytest.approx(8 * 10e-6)
    assert table.step_seconds([(512, 512)] * 2, 8, 64) == pytest.approx(8 * (2e-6 + 2 * 4e-6))
    with pytest.raises(DiagnosisError):
        AttentionTable([32, 512, 2048], [16, 64, 128], whole, split, 1, float(1 << 27))  # split over one thread
