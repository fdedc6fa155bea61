"""report.html is one self-contained file: nothing fetched, run text escaped, a section per probe
file (the generic renderer for an unknown probe), and it renders in a real headless browser."""

import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest
from synth_run import T0, make_run, rec

from reports.write import write_reports
from rundir import RunDir

EVIL = "<script>alert(1)</script>"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("rep") / "run"
    records = [rec(i * 0.1, 0.1 + 0.01 * (i % 7), 0.5 + 0.01 * (i % 5), 11, level="c1", concurrency=1)
               for i in range(40)]
    records += [rec(i * 0.1 + 5, 0.3, 0.9, 11, level="c4", concurrency=4) for i in range(40)]
    records.append(rec(6, None, None, 11, status="error", level="c4", concurrency=4, kind="http_status",
                       error='HTTP 500 <img src="http://evil.example/x.png" onerror="alert(2)">'))
    run = make_run(path, records, {"c1": (0, 4), "c4": (5, 9)}, model=EVIL)
    rows = [{"t": T0 + i, "util": {"gpu0": i % 3, "gpu1": 2.0}, "state": EVIL, "temp_c": 40 + i} for i in range(10)]
    (run.path / "probes" / "custom.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    summary, paths = write_reports(run)
    return run, summary, paths


def test_all_files_written(report):
    run, summary, paths = report
    assert all(p.is_file() and p.stat().st_size for p in paths.values())
    saved = RunDir(run.path).read_summary()
    assert [lv["level_id"] for lv in saved["levels"]] == ["c1", "c4"] and saved["levels"][1]["n_error"] == 1
    csv = paths["csv"].read_text().splitlines()
    assert csv[0].startswith("level_id,concurrency") and len(csv) == 3 and "ttft_p99_s" in csv[0]


def test_html_is_self_contained_and_escaped(report):
    html = report[2]["html"].read_text()
    assert "<script" not in html.lower()                      # no script at all, the model name included
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html     # ... which renders as text
    assert "<img" not in html and "&lt;img src=" in html       # the error string too
    links = _links(html)
    assert links, "the SVGs' internal references (#ids) should have been found"
    for tag, attr, value in links:
        assert value.startswith(("#", "data:")), (tag, attr, value)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", html)
    assert not re.search(r"<link\b", html)
    assert html.count("<svg") >= 5                            # scaling, latency/throughput, CDFs, timeline, probe


def _links(html: str) -> list[tuple[str, str, str]]:
    """Every src/href-like attribute of every real element (text that looks like one is not)."""
    found = []

    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, k, v or "") for k, v in attrs if k.split(":")[-1] in ("src", "href", "srcset", "action"))

    Links().feed(html)
    return found


def test_generic_probe_section(report):
    html = report[2]["html"].read_text()
    assert "probe: custom" in html and "10 samples of probes/custom.jsonl" in html
    assert "util.gpu1 = 2" in html                             # a constant is printed, not plotted
    section = html[html.index("probe: custom"):]
    assert "gpu0" in section and "temp_c" in section           # plotted field groups and lines
    assert "state: &lt;script&gt;" in section                  # text fields listed, escaped


def test_markdown_escapes_and_has_the_table(report):
    md = report[2]["md"].read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md and "<img" not in md
    assert "| c1 |" in md.replace("\\", "") or "| c1 " in md
    assert "## Metric definitions" in md and "GenAI-Perf" in md


def test_no_probe_files_no_section(tmp_path):
    run = make_run(tmp_path / "r", [rec(0, 0.1, 0.5, 11)], {"c1": (0, 1)})
    _, paths = write_reports(run)
    assert "No probe data in this run" in paths["html"].read_text()


def _browser() -> str | None:
    return next((shutil.which(b) for b in ("chromium", "chromium-headless-shell", "chromium-browser",
                                            "google-chrome") if shutil.which(b)), None)


@pytest.mark.skipif(_browser() is None, reason="no headless browser installed (.ci/run installs chromium)")
def test_renders_in_a_headless_browser(report, tmp_path):
    html_path = report[2]["html"]
    proc = subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", html_path.as_uri()],
                          capture_output=True, text=True, timeout=90)
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'id="summary-table"' in dom and "c4" in dom and "TTFT P50/P99 ms" in dom
    assert "<script" not in dom.lower() and "&lt;script&gt;alert(1)" in dom   # the name is text, not a node
