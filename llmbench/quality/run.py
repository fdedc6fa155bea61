"""The quantization quality check: a quantized model against the same model unquantized.

The seed's rule (first article, 4.3 and 6.3): no quantization change ships without a quality
check. Both models read the same prompts with teacher forcing (every position of the prompt is
scored, so one forward pass gives T next-token distributions), then each continues greedily.

Metrics (all over next-token distributions at prompt positions, natural log):
- KL(p_ref || p_quant), mean and max over positions: how far the distribution moved;
- top-1 agreement: share of positions where both models' most likely token is the same;
- perplexity of each model on the prompt text, and their ratio (quant / ref);
- greedy agreement: tokens the two greedy continuations share before they first differ
  (mean over prompts, as a fraction of the tokens generated).

A random-weight model (the `tiny` presets) has near-uniform next-token distributions: its
information, KL(p_ref || uniform) = log V - H(p_ref), is 0.01-0.2 nats where a trained model has
several. Absolute KL is then tiny whatever happens, and top-1 compares near-ties (tiny's median
top-1 margin is 0.15 logits), so for such a reference (information < `near_uniform_nats`) the
check judges KL *relative to the reference's information* instead, and reports top-1 without
judging it. Measured on `tiny`: sound FP8 moves 1.2% of the information, scales x4 move 185%.
Thresholds for trained checkpoints are the absolute ones; tune either with the options.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import torch

from refengine.errors import RefEngineError

BUILTIN_TEXTS = (
    "The history of the city begins with a small fishing village on the northern bank of the river.",
    "To install the package, download the archive, unpack it, and run the setup script as an administrator.",
    "She opened the letter slowly, afraid of what it might say about the decision of the committee.",
    "Photosynthesis converts light energy into chemical energy that is stored in glucose molecules.",
    "The meeting was moved to Thursday because half of the team was travelling to the conference.",
    'def add(a, b):\n    """Return the sum of two numbers."""\n    return a + b\n',
    "Interest rates rose for the third time this year, and analysts expect housing prices to cool.",
    "A paged KV cache divides memory into fixed-size blocks so that requests can grow without copying.",
    "After the rain stopped, the children ran outside to look for frogs in the puddles near the school.",
    "The recipe calls for two cups of flour, one egg, a pinch of salt and enough milk to make a batter.",
    "In the final minutes of the match the goalkeeper saved a penalty and the crowd rose to its feet.",
    "Large language models generate text one token at a time, each conditioned on everything before it.",
)


@dataclass
class QualityThresholds:
    """Pass/fail limits. Defaults suit a trained checkpoint in FP8 with per-channel scales."""

    max_mean_kl: float = 0.02  # nats; well-behaved FP8 lands around 1e-3..1e-2
    max_max_kl: float = 1.0  # nats; one position may move, not collapse
    min_top1_agreement: float = 0.85
    max_ppl_ratio: float = 1.05  # quantized perplexity at most 5% above the reference
    max_relative_kl: float = 0.1  # near-uniform reference: mean KL / reference information
    near_uniform_nats: float = 1.0  # reference information below this = near-uniform (random weights)


@dataclass
class QualityResult:
    num_prompts: int
    num_positions: int
    mean_kl: float
    max_kl: float
    top1_agreement: float
    ppl_ref: float
    ppl_quant: float
    greedy_match_mean: float  # tokens before the first difference, mean over prompts
    greedy_match_fraction: float  # the same over the tokens generated
    greedy_tokens: int
    ref_information: float  # mean KL(p_ref || uniform) in nats
    thresholds: QualityThresholds
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ppl_ratio(self) -> float:
        return self.ppl_quant / self.ppl_ref

    @property
    def relative_kl(self) -> float:
        return self.mean_kl / max(self.ref_information, 1e-12)

    @property
    def near_uniform(self) -> bool:
        return self.ref_information < self.thresholds.near_uniform_nats

    @property
    def passed(self) -> bool:
        return all(self.checks.values())

    def judge(self) -> "QualityResult":
        t = self.thresholds
        if self.near_uniform:  # see the module docstring: absolute KL and top-1 say nothing here
            self.checks = {"relative_kl": self.relative_kl <= t.max_relative_kl}
        else:
            self.checks = {
                "mean_kl": self.mean_kl <= t.max_mean_kl,
                "top1_agreement": self.top1_agreement >= t.min_top1_agreement,
            }
        self.checks["max_kl"] = self.max_kl <= t.max_max_kl
        self.checks["ppl_ratio"] = self.ppl_ratio <= t.max_ppl_ratio
        return self

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "ppl_ratio": self.ppl_ratio,
            "relative_kl": self.relative_kl,
            "near_uniform": self.near_uniform,
            "passed": self.passed,
        }


def load_prompts(dataset: str | Path | None) -> list[str]:
    """The built-in texts, or a file: one prompt per line (.txt) or JSON lines with "text"/"prompt"."""
    if dataset is None:
        return list(BUILTIN_TEXTS)
    path = Path(dataset)
    if not path.is_file():
        raise RefEngineError(f"dataset {str(path)!r} does not exist")
    prompts = []
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        if path.suffix == ".jsonl":
            try:
                row = json.loads(line)
                prompts.append(str(row.get("text") or row["prompt"]))
            except (json.JSONDecodeError, KeyError, AttributeError):
                raise RefEngineError(f"{path}:{i} is not a JSON object with a 'text' or 'prompt' field") from None
        else:
            prompts.append(line)
    if not prompts:
        raise RefEngineError(f"dataset {path} holds no prompts")
    return prompts


def teacher_forced_logits(llm, ids: list[int]) -> torch.Tensor:
    """float32 logits [T, vocab] at every position of `ids`, on a private KV cache of the engine's dtype;
    on the CPU, so the statistics run there whatever device the engine is on (a GPU engine's logits on
    the GPU met the CPU's token ids in `compare_positions`)."""
    from refengine.quant.kv_calibration import run_with_scratch_cache

    engine = llm.llm_engine
    model = engine.runner.model
    hidden = run_with_scratch_cache(model, ids, engine.args.block_size, engine.device, engine.kv_cache_dtype)
    return model.compute_logits(hidden).float().cpu()


def compare_positions(ref: torch.Tensor, quant: torch.Tensor, ids: list[int]) -> dict:
    """Per-position statistics of two [T, V] logit tensors for the token sequence `ids`."""
    lp_ref, lp_q = torch.log_softmax(ref, -1), torch.log_softmax(quant, -1)
    p_ref = lp_ref.exp()
    kl = (p_ref * (lp_ref - lp_q)).sum(-1).clamp(min=0.0)  # rounding can give -1e-9
    info = math.log(ref.shape[-1]) + (p_ref * lp_ref).sum(-1)  # log V - H(p_ref)
    nxt = torch.tensor(ids[1:], dtype=torch.long)
    return {
        "kl": kl,
        "info": info,
        "top1_same": (ref.argmax(-1) == quant.argmax(-1)),
        # position t predicts token t+1: the last position has no target
        "nll_ref": -lp_ref[:-1].gather(1, nxt[:, None]).squeeze(1),
        "nll_quant": -lp_q[:-1].gather(1, nxt[:, None]).squeeze(1),
    }


def greedy_match_length(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def run_quality_check(
    ref_llm,
    quant_llm,
    prompts: list[str],
    thresholds: QualityThresholds | None = None,
    greedy_tokens: int = 32,
    max_prompt_tokens: int = 256,
    progress: Callable[[int, int], None] | None = None,
) -> QualityResult:
    """Score every prompt with both models, then compare greedy continuations; judge against thresholds."""
    from refengine import SamplingParams

    thresholds = thresholds or QualityThresholds()
    engine = ref_llm.llm_engine
    limit = min(max_prompt_tokens, engine.max_model_len - greedy_tokens - 1)
    if limit < 2:
        raise RefEngineError(
            f"max_model_len {engine.max_model_len} leaves no room for a prompt plus "
            f"{greedy_tokens} greedy tokens; lower --greedy-tokens"
        )
    token_lists = [engine.encode_prompt(p)[1][:limit] for p in prompts]
    token_lists = [ids for ids in token_lists if len(ids) >= 2]
    if not token_lists:
        raise RefEngineError("every prompt is shorter than 2 tokens; nothing to score")
    total = len(token_lists) + 1
    kls, same, nll_r, nll_q, info = [], [], [], [], []
    for i, ids in enumerate(token_lists):
        stats = compare_positions(teacher_forced_logits(ref_llm, ids), teacher_forced_logits(quant_llm, ids), ids)
        kls.append(stats["kl"])
        info.append(stats["info"])
        same.append(stats["top1_same"])
        nll_r.append(stats["nll_ref"])
        nll_q.append(stats["nll_quant"])
        if progress:
            progress(i + 1, total)
    params = SamplingParams(max_tokens=greedy_tokens, temperature=0.0, ignore_eos=True)
    outs_r = ref_llm.generate([list(t) for t in token_lists], params)
    outs_q = quant_llm.generate([list(t) for t in token_lists], params)
    matches = [
        greedy_match_length(list(a.outputs[0].token_ids), list(b.outputs[0].token_ids)) for a, b in zip(outs_r, outs_q)
    ]
    if progress:
        progress(total, total)
    kl, top1 = torch.cat(kls), torch.cat(same).float()
    match_mean = sum(matches) / len(matches)
    return QualityResult(
        num_prompts=len(token_lists),
        num_positions=int(kl.numel()),
        mean_kl=float(kl.mean()),
        max_kl=float(kl.max()),
        top1_agreement=float(top1.mean()),
        ppl_ref=math.exp(float(torch.cat(nll_r).mean())),
        ppl_quant=math.exp(float(torch.cat(nll_q).mean())),
        greedy_match_mean=match_mean,
        greedy_match_fraction=match_mean / greedy_tokens,
        greedy_tokens=greedy_tokens,
        ref_information=float(torch.cat(info).mean()),
        thresholds=thresholds,
    ).judge()


def sabotage_fp8_scales(llm, factor: float) -> int:
    """Multiply every FP8 weight scale by `factor` (a deliberately broken quantization, to prove the
    check fails it). Returns how many layers were changed."""
    from refengine.quant.fp8_matmul import drop_dequant_cache

    n = 0
    for module in llm.llm_engine.runner.model.modules():
        scale = getattr(module, "weight_scale", None)
        if isinstance(scale, torch.Tensor):
            scale.data.mul_(factor)
            drop_dequant_cache(module)
            n += 1
    if n == 0:
        raise RefEngineError("--sabotage-scales needs an FP8 model (--quantization fp8): no weight scales found")
    return n
