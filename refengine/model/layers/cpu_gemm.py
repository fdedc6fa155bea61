"""float32 and bfloat16 linears on CPU through oneDNN with the weight pre-packed once, instead of F.linear.

Why: F.linear on CPU calls MKL sgemm with the [out, in] weight as it is stored, re-laying it out
on every call; at decode batch sizes (tens of rows) that costs as much as the arithmetic. oneDNN's
inner-product primitive with a weight reordered ahead of time into its blocked layout runs the
same matmul 1.3-2x faster at 16-128 rows on this machine's AVX2 cores, and no slower at 2,048
(bench/RESULTS.md, "Engine performance (issue 16)"). This is what inductor's CPU freezing pass
does; we call the same two ops directly so no compile step is needed.

A few float32 rows (a lone decode: every linear of a step at concurrency 1; two or three
sequences decoding) may be the exception: MKL's sgemm on a few rows streams the plain [out, in]
weight at memory speed, while oneDNN's packed inner product there is slower on some hosts and not
on others. On one AVX2 core the packed path lost on one row (the `tiny` model's decode-step
linears: 30-33 ms against 24-28) and won from two (1.1-2.1x); on an AMX Xeon it lost up to three
rows (a `tiny` float32 decode step of 2 sequences: 22.1 ms packed, 20.3 with F.linear) and was
level from four (bench/cpu_decode_paths.py); on an AVX-512 AMD EPYC the packed path won at one
row too: a lone float32 decode through F.linear ran 19.5 ms a token, packed 12.7 (vLLM, oneDNN:
14.4; bench/RESULTS.md, "On an AVX-512 AMD EPYC"). A rule fitted to one host is wrong on another, so the
crossover is measured once per process (`plain_float32_rows`: the same weight both ways at 1, 2 and
3 rows), one row included. Measured for issue 26 (refengine against vLLM) and issue 28 (the step
model's small decode batches); docs/engine.md, "Packed linears".

bfloat16 weights are packed too where oneDNN computes bfloat16 natively (AVX-512 BF16 or AMX:
refengine/numerics/cpu_bfloat16.py), one row included: there F.linear also re-lays the
weight out on every call, and the packed path was 1.2-1.7x faster from 1 to 64 rows of a 1,024 x
3,072 linear on an AMX core (docs/engine.md, "Packed linears"). Without native bfloat16 (an AVX2
host) F.linear in bfloat16 converts, and its time grows by ~18 ms a row for the `tiny` model's
linears; there the weight is packed widened to float32 (exact: float32 holds every bfloat16), the
rows are widened, multiplied and summed in float32 (as a bfloat16 GEMM sums) and the output rounded
to bfloat16 once, 4-7x faster from 16 rows (bench/linear_paths.py). A lone row stays with F.linear,
which reads half the bytes, by the same kind of once-per-process probe (`plain_widened_bfloat16_rows`).

Many float32 rows can be the exception at the other end: on an AVX2 AMD EPYC (Zen 3), one thread,
MKL's sgemm beat the packed inner product from 128 rows (10-12% at 256-1,024), where on every
AVX-512 and AMX host measured oneDNN kept winning (2.1-2.4x at 2,048). So that crossover is measured
once per process too (`plain_float32_from_rows`), and never assumed.

A small float32 weight (under MIN_PACKED_FLOAT32 elements, 512 x 1,024) stays with F.linear too:
oneDNN's call costs ~15 us whatever the size, more than the whole product of a 64 x 176 weight (3
us through F.linear), and it now and then stalls for 0.2-1.8 ms waking its threads; on an AMX Xeon
F.linear was as fast or faster at every row count up to 64 for weights up to 256 x 768, and the
packed path won from 512 x 1,536 at 16 rows (docs/engine.md, "Packed linears"). Real models'
weights are all far above it; the bundled test models' are below.

It degrades cleanly: the packed path is used only for a float32 or bfloat16 CPU weight, only if
torch has the ops, and only after a self-check against F.linear on the real weight; otherwise
F.linear. `REFENGINE_CPU_PACKED_GEMM=0` turns it off (the bench flips `ENABLED` for
side-by-side runs).

The dense weight is kept (state dicts, TP loaders and tests read it), so weights take twice
their memory on CPU; the packed copy is rebuilt if the weight tensor is replaced.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from refengine.numerics import cpu_bfloat16

log = logging.getLogger(__name__)

ENABLED = os.environ.get("REFENGINE_CPU_PACKED_GEMM", "1") != "0"
MIN_PACKED_FLOAT32 = 512 * 1024  # elements of a float32 weight below which F.linear is used (see above)
_CHECK_ROWS = 5


def _ops_available() -> bool:
    return (
        torch.backends.mkldnn.is_available()
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


# How close the packed product must come to F.linear's, per packed dtype (relative to the largest
# output): bfloat16 keeps 8 bits of mantissa, and the two paths may accumulate differently.
_TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def packs(dtype: torch.dtype) -> bool:
    """Whether a CPU weight of this dtype goes through the packed path (when ENABLED and the ops exist):
    float32, and bfloat16 (natively computed, or through float32: `packed_dtype`)."""
    return dtype in (torch.float32, torch.bfloat16)


def packed_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a weight of `dtype` is packed in: its own where the CPU computes it (float32
    anywhere, bfloat16 with AVX-512 BF16 or AMX), float32 for bfloat16 elsewhere (see above)."""
    return dtype if cpu_bfloat16.cpu_keeps(dtype) else torch.float32


def pack(weight: torch.Tensor) -> torch.Tensor | None:
    """The oneDNN-packed copy of a CPU weight [out, in], or None where it does not apply."""
    if not ENABLED or weight.device.type != "cpu" or weight.dim() != 2 or not packs(weight.dtype):
        return None
    if not _ops_available():
        return None
    if packed_dtype(weight.dtype) == torch.float32 and weight.numel() < MIN_PACKED_FLOAT32:
        return None
    try:
        with torch.no_grad():
            packed = reorder(weight.detach().to(packed_dtype(weight.dtype)))
            x = torch.randn(_CHECK_ROWS, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
            want, got = F.linear(x, weight).float(), packed_linear(x, packed, None).float()
            tol = _TOLERANCE[weight.dtype] * (1.0 + float(want.abs().max()))
            if got.shape != want.shape or float((got - want).abs().max()) > tol:
                log.info("oneDNN packed linear disagrees with F.linear; using F.linear")
                return None
        return packed
    except (RuntimeError, NotImplementedError) as exc:  # an op missing or refusing this shape
        log.info("oneDNN packed linear unavailable (%s); using F.linear", exc)
        return None


def reorder(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's packed layout of a CPU weight [out, in], as it is (no dtype change, no self-check: see pack)."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, None)


def packed_linear(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [rows, in] through a packed weight; bfloat16 rows through a float32 one come back in bfloat16."""
    if x.dtype == packed.dtype:
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    # bfloat16 rows through a float32 weight: widened exactly, multiplied and summed in float32 (as a
    # bfloat16 GEMM sums), rounded to bfloat16 once at the end
    widened_bias = None if bias is None else bias.float()
    return torch.ops.mkldnn._linear_pointwise(x.float(), packed, widened_bias, "none", [], "").to(x.dtype)


class PackedWeight:
    """A weight's packed copy, built on first use and rebuilt if the weight tensor changes."""

    __slots__ = ("key", "packed")

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.packed: torch.Tensor | None = None

    def get(self, weight: torch.Tensor) -> torch.Tensor | None:
        key = (weight.data_ptr(), tuple(weight.shape), weight.dtype, weight.device)
        if key != self.key:
            self.key, self.packed = key, pack(weight)
        return self.packed


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, cache: PackedWeight) -> torch.Tensor:
    """F.linear(x, weight, bias), through the packed weight where it applies (any leading dims)."""
    if not ENABLED or not packs(x.dtype) or x.device.type != "cpu" or torch.is_grad_enabled():
        return F.linear(x, weight, bias)
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    if packed_dtype(x.dtype) == torch.float32 and (
        weight.numel() < MIN_PACKED_FLOAT32  # never packed: no crossover to measure for it
        or rows <= plain_rows(x.dtype)  # a few rows: F.linear on the plain weight is faster (see above)
        or (x.dtype == torch.float32 and rows >= plain_float32_from_rows())  # many, on some hosts
    ):
        return F.linear(x, weight, bias)
    packed = cache.get(weight)
    if packed is None:
        return F.linear(x, weight, bias)
    shape = x.shape
    out = packed_linear(x.reshape(-1, shape[-1]).contiguous(), packed, bias)
    return out.view(*shape[:-1], out.shape[-1])


# The crossover probe: a decode-sized float32 weight (the `tiny` model's down projection), a few
# copies so that each call reads its weight from beyond the core's own caches, as a step does.
_PROBE_SHAPE = (1024, 2816)
_PROBE_COPIES = 4
_PROBE_ROUNDS = 5
_PROBE_MAX_ROWS = 3  # from 4 rows up the packed path won on every host measured (see above)


def _each(op: Callable[..., torch.Tensor], x: torch.Tensor, weights: list[torch.Tensor]) -> None:
    for w in weights:
        op(x, w, None)


def _median_s(fn: Callable[[], object], rounds: int = _PROBE_ROUNDS) -> float:
    fn()  # first call: oneDNN builds its primitive
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def measure_plain_float32_rows(dtype: torch.dtype = torch.float32) -> int:
    """Up to how many rows (0 to _PROBE_MAX_ROWS) a linear of `dtype` packed in float32 (a float32 one,
    or a bfloat16 one where the CPU has no native bfloat16) goes to F.linear rather than the packed
    path: the most rows up to which this process measured F.linear faster at every row count from 1
    (0: the packed path won at one row). Measured once, at the process's torch thread count, in a few
    tens of milliseconds; without the packed path, every row count is F.linear's anyway."""
    if not ENABLED or not _ops_available():
        return _PROBE_MAX_ROWS
    gen = torch.Generator().manual_seed(0)
    weights = [(torch.randn(*_PROBE_SHAPE, generator=gen) * 0.02).to(dtype) for _ in range(_PROBE_COPIES)]
    with torch.no_grad():
        packed = [reorder(w.float()) for w in weights]
        rows = 0
        for m in range(1, _PROBE_MAX_ROWS + 1):
            x = torch.randn(m, _PROBE_SHAPE[1], generator=gen).to(dtype)
            plain = _median_s(functools.partial(_each, F.linear, x, weights))
            oned = _median_s(functools.partial(_each, packed_linear, x, packed))
            if plain >= oned:
                break
            rows = m
    log.info("%s linears of up to %d rows go to F.linear (measured against oneDNN's packed path)", dtype, rows)
    return rows


@functools.lru_cache(maxsize=None)
def plain_float32_rows() -> int:
    """measure_plain_float32_rows, once per process (on the first float32 linear)."""
    return measure_plain_float32_rows()


@functools.lru_cache(maxsize=None)
def plain_widened_bfloat16_rows() -> int:
    """The same for bfloat16 packed in float32, once per process (on the first such linear)."""
    return measure_plain_float32_rows(torch.bfloat16)


# The many-row probe: prefill-sized row counts, one weight (at these sizes the arithmetic, not the
# weight's trip from memory, sets the time), fewer rounds (a round is tens of milliseconds).
_MANY_ROWS = (128, 256, 512)
_MANY_ROUNDS = 3
_MANY_MARGIN = 0.97  # F.linear must take at most this share of the packed path's time to win


def measure_plain_float32_from_rows() -> int:
    """From how many rows a float32 linear goes back to F.linear: the fewest of _MANY_ROWS from which
    F.linear (MKL's sgemm) was measured faster, by _MANY_MARGIN, at every larger count probed too; a
    count beyond any step (sys.maxsize) where the packed path kept winning, as on every AVX-512 and AMX
    host measured (oneDNN there 2.1-2.4x F.linear at 2,048 rows). On an AVX2 AMD EPYC (Zen 3) F.linear
    was 6% faster at 128 rows and 10-12% at 256-1,024 (docs/engine.md, "Packed linears"). About half
    a second, once per process."""
    if not ENABLED or not _ops_available():
        return sys.maxsize
    gen = torch.Generator().manual_seed(1)
    weight = torch.randn(*_PROBE_SHAPE, generator=gen) * 0.02
    wins = []
    with torch.no_grad():
        packed = reorder(weight)
        for m in _MANY_ROWS:
            x = torch.randn(m, _PROBE_SHAPE[1], generator=gen)
            plain = _median_s(functools.partial(_each, F.linear, x, [weight]), _MANY_ROUNDS)
            oned = _median_s(functools.partial(_each, packed_linear, x, [packed]), _MANY_ROUNDS)
            wins.append(plain <= oned * _MANY_MARGIN)
    from_rows = sys.maxsize
    for m, won in reversed(list(zip(_MANY_ROWS, wins))):
        if not won:
            break
        from_rows = m
    log.info(
        "float32 linears of %s rows go to F.linear (measured against oneDNN's packed path)",
        "no" if from_rows == sys.maxsize else f"{from_rows} or more",
    )
    return from_rows


@functools.lru_cache(maxsize=None)
def plain_float32_from_rows() -> int:
    """measure_plain_float32_from_rows, once per process (on the first float32 linear of many rows)."""
    return measure_plain_float32_from_rows()


def plain_rows(dtype: torch.dtype) -> int:
    """Up to how many rows a linear of `dtype` (packed in float32) goes to F.linear."""
    return plain_float32_rows() if dtype == torch.float32 else plain_widened_bfloat16_rows()
