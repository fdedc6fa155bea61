"""Parallel plans for a model on a cluster: the seed's decision procedure and a ranked table.

Procedure (seed section 2.4): fit on one card (quantized if need be) -> TP inside a node -> PP
across nodes -> EP for MoE. Each candidate (TP, PP, weight dtype) is priced with the memory model
and with its communication:
- TP: two all-reduces per layer (after attention and after the MLP) of tokens x hidden x dtype
  (8192 x 2048 x FP16 = 32 MiB, the seed's figure); a ring all-reduce moves 2(n-1)/n of it over
  each link, so time = bytes x 2(n-1)/n / bandwidth (nccl-tests' busbw definition). Intra-node
  bandwidth while TP stays inside a node, inter-node beyond it.
- PP: one send of tokens x hidden x dtype per stage boundary, and the bubble
  (PP - 1) / (PP + MB - 1): PP 8 with 16 micro-batches ~ 30%, with 32 ~ 18%. Micro-batches are
  capped by the requests that fit (each micro-batch needs at least one).
- EP (MoE): experts spread over the TP group; each layer's tokens go out and back by all-to-all:
  2 x tokens x top-k x hidden x dtype, (n-1)/n of it crossing links.
Ranking: meets the concurrency target (20% headroom, summed over replicas) first; TP that stays
in a node; fewer GPUs per replica (more replicas); unquantized before quantized; fewer PP stages;
less communication time per step.
"""

from __future__ import annotations

from dataclasses import dataclass

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.memory import MemoryEstimate, ServingPlan, allreduce_bytes, estimate_memory
from analyzers.model.presets import ModelShape


@dataclass(frozen=True)
class Cluster:
    nodes: int = 1
    gpus_per_node: int = 8
    gpu_memory_gib: float = 80.0
    intra_node_gbps: float = 450.0  # GB/s per GPU (NVLink 4: ~450 GB/s each way)
    inter_node_gbps: float = 50.0  # GB/s per GPU (400 Gb/s InfiniBand/RoCE NIC per GPU)

    def __post_init__(self) -> None:
        if self.nodes < 1 or self.gpus_per_node < 1:
            raise DiagnosisError("nodes and GPUs per node must be >= 1")
        if self.gpu_memory_gib <= 0 or self.intra_node_gbps <= 0 or self.inter_node_gbps <= 0:
            raise DiagnosisError("GPU memory and bandwidths must be > 0")

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


def pipeline_bubble(pp: int, micro_batches: int) -> float:
    """(PP - 1) / (PP + MB - 1): the idle share of a pipeline filled with MB micro-batches."""
    if pp < 1 or micro_batches < 1:
        raise DiagnosisError("PP and micro-batches must be >= 1")
    return (pp - 1) / (pp + micro_batches - 1)


def ring_allreduce_seconds(nbytes: float, n: int, gbps: float) -> float:
    return 0.0 if n <= 1 else nbytes * 2 * (n - 1) / n / (gbps * 1e9)


@dataclass(frozen=True)
class Candidate:
    tp: int
    pp: int
    weight_dtype: str
    estimate: MemoryEstimate
    replicas: int
    tp_crosses_nodes: bool
    ep: bool
    allreduce_bytes: float  # one all-reduce (there are two per layer)
    allreduce_s: float  # one all-reduce at the bandwidth its TP group sees
    comm_s_per_step: float  # TP all-reduces + EP all-to-alls + PP sends, fullest stage
    micro_batches: int
    bubble: float
    meets_target: bool

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def safe_total(self) -> int:
        return self.estimate.safe_concurrency() * self.replicas

    @property
    def label(self) -> str:
        return f"TP{self.tp} PP{self.pp}" + (" EP" if self.ep else "")

    def sort_key(self) -> tuple:
        quantized = self.estimate.plan.weight_bytes < self.estimate.plan.compute_bytes
        return (
            not self.meets_target,
            self.tp_crosses_nodes,
            self.gpus_per_replica,
            quantized,
            self.pp,
            self.comm_s_per_step,
            -self.safe_total,
        )


def _powers_of_two(limit: int) -> list[int]:
    out, n = [], 1
    while n <= limit:
        out.append(n)
        n *= 2
    return out


def candidate(
    shape: ModelShape, cluster: Cluster, base: ServingPlan, tp: int, pp: int, weight_dtype: str, micro_batches: int
) -> Candidate | None:
    """Price one (TP, PP, dtype); None if the split is impossible or the model does not load."""
    plan = base.with_(tp=tp, pp=pp, weight_dtype=weight_dtype, gpu_memory_gib=cluster.gpu_memory_gib)
    try:
        est = estimate_memory(shape, plan)
    except DiagnosisError:
        return None
    if not (est.loads and est.holds_one_request):
        return None
    crosses = tp > cluster.gpus_per_node
    tp_bw = cluster.inter_node_gbps if crosses else cluster.intra_node_gbps
    one = allreduce_bytes(shape, plan)
    ar_s = ring_allreduce_seconds(one, tp, tp_bw)
    layers = -(-shape.num_layers // pp)
    comm = 2 * layers * ar_s
    ep = shape.is_moe and tp > 1
    if ep:
        a2a = 2 * one * shape.experts_per_token * (tp - 1) / tp
        comm += layers * a2a / (tp_bw * 1e9)
    stages_per_node = max(1, cluster.gpus_per_node // tp)
    pp_bw = cluster.intra_node_gbps if pp <= stages_per_node else cluster.inter_node_gbps
    comm += (pp - 1) * one / (pp_bw * 1e9)
    mb = max(1, min(micro_batches, est.max_concurrency()))
    replicas = cluster.gpus // (tp * pp)
    return Candidate(
        tp=tp,
        pp=pp,
        weight_dtype=weight_dtype,
        estimate=est,
        replicas=replicas,
        tp_crosses_nodes=crosses,
        ep=ep,
        allreduce_bytes=one,
        allreduce_s=ar_s,
        comm_s_per_step=comm,
        micro_batches=mb,
        bubble=pipeline_bubble(pp, mb) if pp > 1 else 0.0,
        meets_target=est.safe_concurrency() * replicas >= base.concurrency,
    )


def rank_plans(
    shape: ModelShape, cluster: Cluster, base: ServingPlan, micro_batches: int = 16, quantize: bool = True
) -> list[Candidate]:
    """Every TP x PP (powers of two, within the cluster) in the given dtype, plus fp8 if the weights
    are 16-bit and `quantize`; feasible ones ranked best first."""
    dtypes = [base.weight_dtype] + (["fp8"] if quantize and base.weight_bytes > 1 else [])
    out = []
    for dtype in dtypes:
        for tp in _powers_of_two(cluster.gpus):
            for pp in _powers_of_two(cluster.gpus // tp):
                c = candidate(shape, cluster, base, tp, pp, dtype, micro_batches)
                if c is not None:
                    out.append(c)
    return sorted(out, key=Candidate.sort_key)


def decision_steps(shape: ModelShape, cluster: Cluster, ranked: list[Candidate], weight_dtype: str) -> list[str]:
    """The seed's procedure, narrated with the candidates it found."""

    def first(pred) -> Candidate | None:
        return next((c for c in ranked if pred(c)), None)

    steps = []
    target_met = False
    one = first(lambda c: c.gpus_per_replica == 1 and c.weight_dtype == weight_dtype)
    one_q = first(lambda c: c.gpus_per_replica == 1)
    if one:
        target_met = one.meets_target
        steps.append(
            f"1. one card: fits in {one.weight_dtype} ({one.estimate.max_concurrency()} requests/card, "
            f"{one.replicas} replicas{', meets the target' if target_met else ', below the target'})"
        )
    elif one_q:
        target_met = one_q.meets_target
        steps.append(
            f"1. one card: only quantized ({one_q.weight_dtype}), {one_q.estimate.max_concurrency()} "
            "requests/card; check quality first"
        )
    else:
        steps.append("1. one card: does not fit, even quantized")
    in_node = lambda c: c.pp == 1 and 1 < c.tp <= cluster.gpus_per_node  # noqa: E731
    tp = first(lambda c: in_node(c) and c.meets_target) or first(in_node)
    if target_met:
        steps.append("2. TP inside a node: not needed (one card per replica meets the target)")
    else:
        steps.append(
            f"2. TP inside a node: TP{tp.tp} ({tp.weight_dtype}, {tp.estimate.max_concurrency()} requests/"
            f"replica{'' if tp.meets_target else ', below the target'})"
            if tp
            else f"2. TP inside a node: no TP <= {cluster.gpus_per_node} loads the model"
        )
        target_met = bool(tp and tp.meets_target)
    pp = first(lambda c: c.pp > 1 and not c.tp_crosses_nodes and c.meets_target)
    if target_met:
        steps.append("3. PP across nodes: not needed")
    else:
        steps.append(
            f"3. PP: TP{pp.tp} PP{pp.pp} ({pp.weight_dtype}, bubble {pp.bubble:.0%} at "
            f"{pp.micro_batches} micro-batches)"
            if pp
            else "3. PP: no plan meets the target; add GPUs"
        )
    if shape.is_moe:
        steps.append(
            f"4. EP for MoE: {shape.num_experts} experts (top-{shape.experts_per_token}) spread over "
            "the TP group; all-to-all per layer counted in the comm time"
        )
    else:
        steps.append("4. EP: dense model, not applicable")
    return steps
