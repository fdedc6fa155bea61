"""The precision policy: which linear layers run in FP8 and which stay in the compute dtype.

The seed's lesson (section 6.3 of the first article): FP8 on everything produced visibly more
factual errors; moving the output layer and attention QKV back to FP16 restored quality for
1-2 GB. So:

- always unquantized (not linear layers the FP8 method ever sees): `lm_head`, the token
  embedding, every norm;
- unquantized by default: MoE routers (`mlp.gate`, tiny and sensitive: a flipped expert choice
  changes the whole MLP output);
- `skip` names more modules. A pattern matches a module's dotted name if it equals one of its
  components (`qkv_proj`, `self_attn`), a dotted suffix (`self_attn.o_proj`), or as a glob
  (`model.layers.0.*`). Hugging Face's unfused names are accepted and mean their fused layer:
  q_proj/k_proj/v_proj -> qkv_proj, gate_proj/up_proj -> gate_up_proj (one matmul, one precision).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase

from refengine.errors import RefEngineError

ALWAYS_UNQUANTIZED = ("lm_head", "embed_tokens", "norms")
DEFAULT_SKIP = ("gate",)  # MoE router: `mlp.gate` (a component match, not gate_up_proj)
FUSED_ALIASES = {
    "q_proj": "qkv_proj",
    "k_proj": "qkv_proj",
    "v_proj": "qkv_proj",
    "gate_proj": "gate_up_proj",
    "up_proj": "gate_up_proj",
}
# The seed's fix, spelled as a skip list; `--quantization-skip seed` expands to it.
SEED_FIX = ("qkv_proj",)


def parse_skip(text: str | None) -> tuple[str, ...]:
    """'qkv_proj, o_proj' -> ('qkv_proj', 'o_proj'), aliases resolved; 'seed' = the seed's fix."""
    if not text:
        return ()
    out: list[str] = []
    for raw in text.split(","):
        pat = raw.strip()
        if not pat:
            continue
        if pat == "seed":
            out.extend(SEED_FIX)
            continue
        if any(c.isspace() for c in pat):
            raise RefEngineError(f"quantization_skip entry {pat!r} has whitespace inside; separate names by commas")
        last = pat.rsplit(".", 1)[-1]
        if last in FUSED_ALIASES:
            pat = pat[: len(pat) - len(last)] + FUSED_ALIASES[last]
        if pat not in out:
            out.append(pat)
    return tuple(out)


def matches(name: str, pattern: str) -> bool:
    """Does a skip pattern name this module? (component, dotted suffix, or glob)."""
    parts = name.split(".")
    if pattern in parts:
        return True
    if "." in pattern and (name == pattern or name.endswith("." + pattern)):
        return True
    return any(ch in pattern for ch in "*?[") and fnmatchcase(name, pattern)


@dataclass
class PrecisionPolicy:
    """Which linear layers are FP8. `decide` is the one question the model builder asks."""

    quantization: str | None = None  # None (off) or "fp8"
    weight_scales: str = "channel"  # channel | block (online); a checkpoint brings its own
    skip: tuple[str, ...] = ()  # user patterns, already alias-resolved
    default_skip: tuple[str, ...] = DEFAULT_SKIP
    kv_cache_dtype: str = "auto"
    # Filled in by apply(): the concrete module names on each side (for the start-up line).
    quantized: list[str] = field(default_factory=list)
    unquantized: list[str] = field(default_factory=list)

    def decide(self, module_name: str) -> bool:
        """True if this linear layer runs in FP8."""
        if self.quantization is None:
            return False
        return not any(matches(module_name, p) for p in (*self.default_skip, *self.skip))

    def record(self, module_name: str, quantized: bool) -> None:
        (self.quantized if quantized else self.unquantized).append(module_name)

    def unused_patterns(self) -> list[str]:
        """User patterns that matched no linear layer (probably a typo)."""
        names = self.quantized + self.unquantized
        return [p for p in self.skip if not any(matches(n, p) for n in names)]

    def kinds(self, names: list[str]) -> list[str]:
        """Module names without the layer index, deduplicated: model.layers.3.mlp.down_proj -> mlp.down_proj."""
        seen: list[str] = []
        for n in names:
            parts = n.split(".")
            short = ".".join(parts[3:]) if len(parts) > 3 and parts[1] == "layers" else n
            if short not in seen:
                seen.append(short)
        return seen

    def as_dict(self) -> dict:
        """What run.json and /metrics record."""
        return {
            "quantization": self.quantization or "none",
            "weight_scales": self.weight_scales if self.quantization else None,
            "kv_cache_dtype": self.kv_cache_dtype,
            "skip": list(self.skip),
            "fp8_modules": self.kinds(self.quantized),
            "unquantized_modules": [*ALWAYS_UNQUANTIZED, *self.kinds(self.unquantized)],
            "num_fp8_linears": len(self.quantized),
        }

    def summary(self) -> str:
        """One line for the start-up log."""
        d = self.as_dict()
        if not self.quantization:
            weights = "weights unquantized"
        else:
            weights = (
                f"weights fp8 ({d['weight_scales']} scales) in {', '.join(d['fp8_modules']) or 'no layer'}; "
                f"kept in compute dtype: {', '.join(d['unquantized_modules'])}"
            )
        return f"precision policy: {weights}; KV cache {self.kv_cache_dtype}"
