"""A regression gate's result as CI systems read it: one line, JUnit XML, a GitHub step summary."""

from __future__ import annotations

from xml.etree import ElementTree as ET

from analyzers.compare import Comparison
from analyzers.regression import GateResult, Regression


def _value(metric: str, v: float) -> str:
    return f"{v:.1f} tok/s" if "tok/s" in metric else f"{v * 1000:.1f} ms"


def regression_words(r: Regression) -> str:
    if r.b is None or r.rel is None:
        return f"{r.level_id} {r.metric} {_value(r.metric, r.a)} -> unbounded ({r.note})"
    return (
        f"{r.level_id} {r.metric} {_value(r.metric, r.a)} -> {_value(r.metric, r.b)} ({r.rel:+.1%}, "
        f"95% interval of the change excludes 0)"
    )


def gate_line(g: GateResult) -> str:
    """The one-line reason a build failed or passed."""
    if not g.failed:
        return f"no regression beyond {g.tolerance:.0%} in {g.checked} checks of {', '.join(g.metrics)}"
    worst = max(g.regressions, key=lambda r: float("inf") if r.rel is None else abs(r.rel))
    more = f" and {len(g.regressions) - 1} more" if len(g.regressions) > 1 else ""
    return f"regression beyond {g.tolerance:.0%}: {regression_words(worst)}{more}"


def junit_xml(comparisons: list[Comparison], g: GateResult) -> str:
    """One testsuite per comparison, one testcase per (level, gated metric); a regression is a failure."""
    failing = {(r.level_id, r.metric): r for r in g.regressions}
    suites = ET.Element("testsuites", name="llmbench compare")
    for c in comparisons:
        suite = ET.SubElement(suites, "testsuite", name=f"{c.run_b} vs {c.run_a}")
        n = failures = 0
        for lc in c.levels:
            for d in lc.deltas:
                if d.metric not in g.metrics or d.verdict == "n/a":
                    continue
                n += 1
                case = ET.SubElement(suite, "testcase", classname=lc.level_id, name=d.metric)
                r = failing.get((lc.level_id, d.metric))
                if r is not None:
                    failures += 1
                    ET.SubElement(case, "failure", message=regression_words(r))
        suite.set("tests", str(n))
        suite.set("failures", str(failures))
    return ET.tostring(suites, encoding="unicode", xml_declaration=True)


def step_summary(comparisons: list[Comparison], g: GateResult) -> str:
    """Markdown for $GITHUB_STEP_SUMMARY: the verdict line, then the regressions."""
    lines = [f"### llmbench compare: {'FAILED' if g.failed else 'passed'}", "", gate_line(g), ""]
    if g.regressions:
        lines += ["| level | metric | A | B | change |", "| --- | --- | --- | --- | --- |"]
        lines += [
            f"| {r.level_id} | {r.metric} | {_value(r.metric, r.a)} | "
            + (
                f"{_value(r.metric, r.b)} | {r.rel:+.1%} |"
                if r.b is not None and r.rel is not None
                else "unbounded | failed requests |"
            )
            for r in g.regressions
        ]
    lines.append(f"\nruns: {', '.join(f'{c.run_b} vs {c.run_a}' for c in comparisons)}")
    return "\n".join(lines) + "\n"
