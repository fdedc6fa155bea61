"""A prediction held against the measurement, in words (analyzers/plan/departures.py computes it):
whose machine the profile describes, said once, and each departure beyond the model's band as a finding."""

from __future__ import annotations

from analyzers.plan.departures import DEPARTURE_BAND, Departure, PredictionCheck

METRIC_NAMES = {
    "ttft_p50_s": "TTFT P50",
    "ttft_p99_s": "TTFT P99",
    "tpot_p50_s": "TPOT P50",
    "tpot_p95_s": "TPOT P95",
    "output_tok_s": "output tok/s",
}


def value_text(metric: str, v: float | None) -> str:
    """Latencies in ms, throughput in tokens/s."""
    if v is None:
        return "—"
    return f"{v:,.1f}" if metric == "output_tok_s" else f"{v * 1000:,.1f}"


def unit(metric: str) -> str:
    return " tok/s" if metric == "output_tok_s" else " ms"


def departure_text(d: float | None) -> str:
    return "—" if d is None else f"{d:+.0%}"


def load_words(concurrency: int | None, request_rate: float | None) -> str:
    if concurrency is not None:
        return f"concurrency {concurrency}"
    return f"{request_rate:g} req/s" if request_rate is not None else "this load"


def _whose(check: PredictionCheck) -> str:
    return "this machine's profile" if check.scope == "this_machine" else f'the profile "{check.profile_name}"'


def scope_line(check: PredictionCheck) -> str:
    """Whose machine the profile describes (said once, above the comparison)."""
    what = f'"{check.profile_name}" ({check.profile_source}' + (
        f", from {check.profile_host})" if check.profile_host else ")"
    )
    if check.scope == "this_machine":
        line = f"Predicted from the profile {what}: this machine, which ran the embedded engine."
        if check.fitted_here:
            line += " The profile was fitted to this very run: agreement here is the fit's, not a prediction's."
        return line
    if check.scope == "other_machine":
        why = (
            "a published GPU's datasheet"
            if check.profile_source == "published"
            else (
                f"measured on {check.profile_host}, not here"
                if check.profile_host
                else "it does not say where it was measured"
            )
        )
        return (
            f"The profile {what} is not this machine's ({why}), and the embedded engine ran here: the predicted "
            "column is what that machine would do, not a check of this run, so no departure is a finding."
        )
    return (
        f"The target is external: the profile {what} is an assumption about the hardware serving it (nothing in "
        "the run says which), so a departure says that assumption is wrong as much as that something outside "
        "the model slows the target."
    )


def band_factor(band: float) -> str:
    """A band as the factor it allows either way: 0.9 -> '×1.9' (measured over 1.9x, or under 1/1.9 of,
    the prediction), so that '52% below' reads against '×2' without doing the inverse in one's head."""
    return f"×{1 + band:.2g}"


def band_caption() -> str:
    bands = ", ".join(f"{METRIC_NAMES[k]} {band_factor(v)}" for k, v in DEPARTURE_BAND.items())  # TTFT P50 ×2.4, ...
    return (
        "Predicted / measured, departure = measured ÷ predicted − 1 (TTFT or TPOT above, or tok/s below, the "
        f"prediction is slower). A finding needs a measurement beyond {bands} its prediction, either way: one "
        "healthy level in a hundred lies that far (bench/RESULTS.md, departure_bands); TTFT P99 and TPOT P95 "
        "are tails, shown and never a finding."
    )


def departure_sentence(d: Departure, check: PredictionCheck) -> str:
    """'TPOT P50 120% above what this machine's profile predicts at concurrency 32 (c32-in128-out64: 46.0 ms
    measured, 20.9 ms predicted; band ×1.9 either way): something outside the model slows it.'"""
    name = METRIC_NAMES[d.metric]
    way = "above" if d.departure > 0 else "below"
    u = unit(d.metric)
    text = (
        f"{name} {abs(d.departure):.0%} {way} what {_whose(check)} predicts at {load_words(d.concurrency, d.request_rate)} "
        f"({d.level_id}: {value_text(d.metric, d.measured)}{u} measured, {value_text(d.metric, d.predicted)}{u} "
        f"predicted; band {band_factor(d.band)} either way)"
    )
    text += (
        _verdict(check, "it")
        if d.slower
        else ": faster than the model allows; the profile overstates what this machine's operators cost."
    )
    if d.invalid:
        text += " The level itself is no valid measurement (its note says why): the cause may be the client's."
    return text


def _verdict(check: PredictionCheck, what: str) -> str:
    """Slower than predicted: something outside the model, or (not this machine) the profile itself."""
    return f": something outside the model slows {what}" + (
        "." if check.scope == "this_machine" else " (or the profile is not of the hardware that served it)."
    )


def every_level_sentence(ds: list[Departure], check: PredictionCheck) -> str:
    """One metric departing the same way at every measured level: one finding, since an offset
    shared by every level is the run's, not one level's: a cost every step pays that the profile does not
    model (typically the server's, for a profile calibrated without --serve), or a load beside the engine
    the whole run long."""
    d0 = ds[0]
    way = "above" if d0.departure > 0 else "below"
    lo, hi = min(ds, key=lambda d: abs(d.departure)), max(ds, key=lambda d: abs(d.departure))
    spread = (
        f"{abs(lo.departure):.0%} at {load_words(lo.concurrency, lo.request_rate)} to {abs(hi.departure):.0%} "
        f"at {load_words(hi.concurrency, hi.request_rate)}"
    )
    text = (
        f"{METRIC_NAMES[d0.metric]} {way} what {_whose(check)} predicts at every level, {len(ds)} of {len(ds)} "
        f"({spread}; band {band_factor(d0.band)} either way): every level departs the same way, so the cause is the "
        "whole run's (a cost the profile does not model, or a load beside the engine), not one level's"
    )
    slowed = "every request's wait for its first token" if d0.metric.startswith("ttft") else "every step"
    text += _verdict(check, slowed) if d0.slower else ": the profile overstates what this machine's operators cost."
    if any(d.invalid for d in ds):
        text += " Some of these levels are no valid measurement (their notes say why): the cause may be the client's."
    return text


def departure_sentences(check: PredictionCheck) -> list[str]:
    """Each departure beyond the band as a finding, except that a metric departing the same way at
    every measured level (two or more) is one finding for them all."""
    out: list[str] = []
    said: set[tuple[str, bool]] = set()
    for d in check.departures:
        key = (d.metric, d.slower)
        if key in said:
            continue
        same = [e for e in check.departures if (e.metric, e.slower) == key]
        judged = [lv for lv in check.levels if lv.measured and lv.check(d.metric).departure is not None]
        if len(same) >= 2 and len(same) == len(judged):
            out.append(every_level_sentence(same, check))
            said.add(key)
        else:
            out.append(departure_sentence(d, check))
    return out


def offline_line(check: PredictionCheck) -> str | None:
    """A calibrated-only profile that predicts this machine too fast: the likely cause, said once."""
    if (
        check.profile_source != "measured"
        or check.scope != "this_machine"
        or not any(d.slower for d in check.departures)
    ):
        return None
    return (
        "The profile was calibrated offline (`llmdiag calibrate` without --serve): it does not see what the "
        "HTTP server adds to every step and request (docs/planning.md), a known part of such a departure; "
        "`llmdiag calibrate --serve`, or a profile fitted to a run (`llmdiag plan --predict-sweep RUN --fit ...`), "
        "learns it."
    )


def unpredicted_line(check: PredictionCheck) -> str | None:
    if not check.not_predicted:
        return None
    return f"Not predicted (the prediction has no such level): {', '.join(check.not_predicted)}."
