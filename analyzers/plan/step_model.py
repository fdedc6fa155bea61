"""The time of one engine step, per operator, from a machine profile (docs/planning.md).

A step computes T tokens for R requests (some decoding one token, some prefilling a chunk) and
samples S of them. Per layer, on one tensor-parallel rank of one pipeline stage:

    qkv      [T, hidden] x [hidden, (heads + 2 kv_heads) x head_dim / TP]
    o_proj   [T, heads x head_dim / TP] x [.., hidden]
    MLP      gate_up [T, hidden] x [.., 2 x intermediate / TP], down [T, intermediate / TP] x [.., hidden]
             (MoE: the top-k experts' rows, T x k, through one expert's shapes, plus the router)
    attention  decode: KV elements read, query elements (context x heads x head_dim) and scores
               (context x heads), over the kernel's threads; prefill: query tokens x context x heads x head_dim
    elementwise  norms, RoPE, activation, residual adds: by T x hidden
    layer overhead  the engine's own code per layer (module calls, dispatch, glue): by requests
    TP       two all-reduces of T x hidden x dtype (after attention and after the MLP)
On a CPU host, ranks that share its cores compute at their share of its threads (the profile's
tables at that thread count). Once per step: lm_head on the S sampled rows (an all-gather of the
logits under TP), a PP send of T x hidden x dtype per stage boundary, and the engine's overhead
(scheduler, inputs, sampler, output processing) by requests. A stage's time is its layers' sum; the
step is the stages' sum (one batch goes through every stage) plus the overhead. A profile fitted to a
served run may price a share of the operators at fewer threads (profile.contended_share: processes
beside the engine hold a core its threads want).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from analyzers.diagnosis_error import DiagnosisError
from analyzers.model.presets import ModelShape
from analyzers.plan.profile import MachineProfile


@dataclass(frozen=True)
class StepShape:
    """What the step model needs of one step: (new tokens, context after the step) per request, and
    how many requests sample a token."""

    chunks: tuple[tuple[int, int], ...]
    num_sampled: int

    def __post_init__(self) -> None:
        if any(n < 1 or ctx < n for n, ctx in self.chunks):
            raise DiagnosisError(f"each chunk needs 1 <= new tokens <= context, got {self.chunks}")
        if not 0 <= self.num_sampled <= len(self.chunks):
            raise DiagnosisError("a step samples at most one token per request")

    @property
    def num_tokens(self) -> int:
        return sum(n for n, _ in self.chunks)


@dataclass
class StepCost:
    total_s: float  # schedule to outputs, every stage in turn, plus the overhead
    stage_s: float  # the slowest pipeline stage (what a full pipeline issues at)
    overhead_s: float
    parts: dict[str, float]  # seconds by operator kind, summed over every stage
    notes: set[str] = field(default_factory=set)  # extrapolations beyond the profile's measurements


class StepModel:
    def __init__(
        self,
        shape: ModelShape,
        profile: MachineProfile,
        tp: int = 1,
        pp: int = 1,
        weight_bytes: float | None = None,
        ranks_per_host: int | None = None,
    ):
        if tp < 1 or pp < 1:
            raise DiagnosisError("TP and PP must be >= 1")
        if shape.num_heads % tp:
            raise DiagnosisError(f"{shape.name}: {shape.num_heads} heads do not split over TP {tp}")
        if pp > shape.num_layers:
            raise DiagnosisError(f"{shape.name}: {shape.num_layers} layers do not fill {pp} pipeline stages")
        # On a CPU host the plan's ranks share the cores (each computes with cores // ranks threads):
        # a rank's operators are priced at its own thread count, not at the whole machine's.
        profile, shared_note = profile.for_ranks(tp * pp if ranks_per_host is None else ranks_per_host)
        self.profile_notes = {shared_note} if shared_note else set()
        self.shape, self.profile, self.tp, self.pp = shape, profile, tp, pp
        # The operators at the next fewer threads, for the share a served engine computes there.
        fewer = profile.contended() if profile.contended_share > 0 else None
        self.contended = None if fewer is None else StepModel(shape, fewer, tp, pp, weight_bytes, ranks_per_host=1)
        self.stage_layers = -(-shape.num_layers // pp)  # the widest stage sets the pace
        # Bytes per weight element the roofline reads (FP8 weights: 1); a measured table is its own dtype's.
        self.weight_bytes = profile.dtype_bytes if weight_bytes is None else weight_bytes

    # ---- operators -------------------------------------------------------------------------
    def matmul_s(self, m: int, k: int, n: int, notes: set[str]) -> float:
        if m <= 0:
            return 0.0
        if self.profile.matmul is not None:
            if self.weight_bytes != self.profile.dtype_bytes:
                notes.add("weights of another dtype than the measured matmuls: priced as measured")
            return self.profile.matmul.seconds(m, k, n, notes)
        b = self.profile.dtype_bytes
        return self.profile.roofline.seconds(2.0 * m * k * n, (m * k + m * n) * b + k * n * self.weight_bytes)

    def attention_s(self, step: StepShape, notes: set[str]) -> float:
        s, p = self.shape, self.profile
        heads, kv_heads = s.num_heads // self.tp, max(1, s.num_kv_heads // self.tp)
        decode = [ctx for n, ctx in step.chunks if n == 1]
        prefill = [(n, ctx) for n, ctx in step.chunks if n > 1]
        kv_elems = 2.0 * sum(decode) * kv_heads * s.head_dim
        scores = float(sum(decode)) * heads
        query_elems = scores * s.head_dim
        work = float(sum(n * ctx for n, ctx in prefill)) * heads * s.head_dim
        t = 0.0
        if decode:
            t += (
                p.attention_decode.seconds(kv_elems, query_elems, scores, p.threads, notes)
                if p.attention_decode
                else p.roofline.seconds(4.0 * query_elems, kv_elems * p.dtype_bytes)
            )
        if prefill and p.attention_prefill_table is not None:
            t += p.attention_prefill_table.step_seconds(prefill, heads, s.head_dim, notes)
        elif prefill:
            t += (
                p.attention_prefill.seconds(work, notes, "prefill attention work")
                if p.attention_prefill
                else p.roofline.seconds(2.0 * work, 0.0)
            )
        return t

    def elementwise_s(self, tokens: int, notes: set[str]) -> float:
        units = float(tokens) * self.shape.hidden_size
        p = self.profile
        if p.elementwise is not None:
            return p.elementwise.seconds(units, notes, "elementwise tokens x hidden")
        # ~10 passes over [T, hidden] (two norms, RoPE, activation, residual adds), each a kernel.
        return 10 * p.roofline.seconds(units, 2 * units * p.dtype_bytes)

    # ---- one layer, one stage, one step ----------------------------------------------------
    def layer_parts(self, step: StepShape, notes: set[str]) -> dict[str, float]:
        s, tp, t = self.shape, self.tp, step.num_tokens
        q_out, kv_out = s.num_heads * s.head_dim // tp, max(1, s.num_kv_heads // tp) * s.head_dim
        mm = self.matmul_s(t, s.hidden_size, q_out + 2 * kv_out, notes) + self.matmul_s(t, q_out, s.hidden_size, notes)
        inter = -(-s.intermediate_size // tp)
        rows = t * s.experts_per_token if s.is_moe else t
        mlp = self.matmul_s(rows, s.hidden_size, 2 * inter, notes) + self.matmul_s(rows, inter, s.hidden_size, notes)
        if s.is_moe:
            mlp += self.matmul_s(t, s.hidden_size, s.num_experts, notes)
            notes.add("MoE: the experts' rows priced as one grouped matmul (perfect balance, no dispatch cost)")
        comm = 2 * self.profile.collective.seconds("all_reduce", t * s.hidden_size * self.profile.dtype_bytes, tp)
        layer_overhead = self.profile.layer_overhead
        return {
            "matmul": mm + mlp,
            "attention": self.attention_s(step, notes),
            "elementwise": self.elementwise_s(t, notes),
            "layer_overhead": layer_overhead.seconds(len(step.chunks)) if layer_overhead else 0.0,
            "tp_comm": comm,
        }

    def _blend(self, parts: "Callable[[StepModel], dict[str, float]]") -> dict[str, float]:
        """`parts` priced by this model, and, for the contended share, by the one at fewer threads."""
        own = parts(self)
        if self.contended is None:
            return own
        w, fewer = self.profile.contended_share, parts(self.contended)
        return {name: (1 - w) * v + w * fewer[name] for name, v in own.items()}

    def step_cost(self, step: StepShape) -> StepCost:
        notes: set[str] = set(self.profile_notes)
        if not step.chunks:
            return StepCost(0.0, 0.0, 0.0, {}, notes)
        s, p, k = self.shape, self.profile, self.profile.compute_scale
        layer = {name: v * k for name, v in self._blend(lambda m: m.layer_parts(step, notes)).items()}
        stage = sum(layer.values()) * self.stage_layers
        vocab = -(-s.vocab_size // self.tp)
        lm_head = self._blend(lambda m: {"": m.matmul_s(step.num_sampled, s.hidden_size, vocab, notes)})[""]
        lm_head += p.collective.seconds("all_gather", step.num_sampled * s.vocab_size * p.dtype_bytes, self.tp)
        lm_head *= k
        send = k * p.collective.seconds("sendrecv", step.num_tokens * s.hidden_size * p.dtype_bytes, self.pp)
        overhead = p.step_overhead.seconds(len(step.chunks))
        parts = {k: v * self.stage_layers * self.pp for k, v in layer.items()}
        parts.update(lm_head=lm_head, pp_send=send * (self.pp - 1), overhead=overhead)
        total = stage * self.pp + lm_head + send * (self.pp - 1) + overhead
        return StepCost(total_s=total, stage_s=stage + lm_head + send, overhead_s=overhead, parts=parts, notes=notes)
