"""report.html is one self-contained file: the answer first, findings said once, the probes' curated
panels with the spike windows shaded when a diagnosis exists, run text escaped, one inline script and
nothing fetched; and it renders in a real headless browser (tests/reports/test_screenshot.py)."""

import json
import re
from html.parser import HTMLParser

import pytest
from report_run import SPIKES, make_report
from synth_run import make_run, rec

from reports.write import write_reports
from rundir import RunDir


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return make_report(tmp_path_factory.mktemp("rep") / "run", diagnosed=True)


@pytest.fixture(scope="module")
def html(report):
    return report[1]["html"].read_text()


def test_all_files_written(report):
    run, paths = report
    assert all(p.is_file() and p.stat().st_size for p in paths.values())
    saved = RunDir(run.path).read_summary()
    assert [lv["level_id"] for lv in saved["levels"]] == ["c1", "c4", "c16", "c32"]
    assert saved["levels"][1]["n_error"] == 1 and saved["finding_groups"]
    csv = paths["csv"].read_text().splitlines()
    assert csv[0].startswith("level_id,concurrency") and len(csv) == 5 and "ttft_p99_s" in csv[0]


def test_self_contained_escaped_and_one_inline_script(html):
    scripts = re.findall(r"<script\b[^>]*>(.*?)</script>", html, flags=re.S | re.I)
    assert len(scripts) == 1  # ours; the model's name is text
    assert not re.search(r"https?:|fetch\(|XMLHttpRequest|import\(|\.src\s*=|innerHTML", scripts[0])
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<img" not in html and "&lt;img src=" in html  # the error string too
    links = _links(html)
    assert links, "the SVGs' internal references (#ids) should have been found"
    for tag, attr, value in links:
        assert value.startswith(("#", "data:")), (tag, attr, value)
    assert not re.search(r"@import|url\(\s*['\"]?(https?:)?//", html)
    assert not re.search(r"<link\b", html)


def _links(html: str) -> list[tuple[str, str, str]]:
    """Every src/href-like attribute of every real element (text that looks like one is not)."""
    found = []

    class Links(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend((tag, k, v or "") for k, v in attrs if k.split(":")[-1] in ("src", "href", "srcset", "action"))

    Links().feed(html)
    return found


def test_the_answer_comes_first_then_the_sections(html):
    order = [
        "answer",
        "findings",
        "summary",
        "plots",
        "timeline",
        "diagnosis",
        "errors",
        "details",
        "config",
        "definitions",
    ]
    positions = [html.index(f'id="{i}"') for i in order]
    assert positions == sorted(positions)
    answer = html[html.index('id="answer"') : html.index('id="findings"')]
    for label in ("Highest load within the SLO", "Ceiling", "Why the tail", "Validity"):
        assert label in answer
    assert "c16 (load 16)" in answer and "95% CI" in answer  # the highest load, with its interval
    assert "long prefills blocked short requests" in answer
    assert "Also measured: prefill p99 420 ms, short ttft ratio 3.1." in answer  # sentences with units
    assert "It coincides with 1 of the 2 spike windows (50% of the tail requests)." in answer
    assert "Errors and timeouts" in answer and "c32" in answer  # what undermines the run


def test_findings_are_said_once_with_their_levels(html):
    section = html[html.index('id="findings"') : html.index('id="summary"')]
    kinds = re.findall(r'data-kind="([^"]+)"', section)
    assert len(kinds) == len(set(kinds)), kinds
    benign = section[section.index('id="expected-differences"') :]
    assert benign.startswith('id="expected-differences"') and "<summary>2 expected difference(s)" in benign
    assert section.count("more than one token") == 1 and "c1 (40 of 40 requests), c4 (40 of 40 requests), c16" in benign
    assert "detokenizer" in benign and "re-tokenizes" in benign
    assert "P99 from fewer than 100 samples (unreliable): c1 (n=40), c4 (n=40), c16 (n=40)." in section
    assert "No successful requests" in section and "c32" in section


def test_spike_windows_are_shaded_when_a_diagnosis_exists(html, tmp_path):
    timeline = html[html.index('id="timeline"') : html.index('id="diagnosis"')]
    probes = timeline[timeline.index('class="probe"') :]
    assert len(re.findall(r'id="spike-window-\d+"', timeline)) >= 2 * len(SPIKES)
    assert re.search(r'id="spike-window-\d+"', probes)  # on the probes' panels too
    assert re.search(r'id="level-edge-\d+"', probes)  # level windows marked
    _, paths = make_report(tmp_path / "plain", diagnosed=False)
    plain = paths["html"].read_text()
    assert not re.search(r'id="spike-window-', plain) and re.search(r'id="level-edge-', plain)


def test_curated_probe_panels_constants_and_all_fields(html):
    server = html[html.index("<h3>server metrics</h3>") :]
    server = server[: server.index("</section>")]
    for title in ("KV cache usage (%)", "requests (count)"):
        assert title in server
    assert '<table class="consts">' in server and "preemptions (/s)" in server  # flat: a constant, not a plot
    host = html[html.index("<h3>host: CPU and memory</h3>") :]
    host = host[: host.index("</section>")]
    assert "CPU per process (cores)" in host and "client" in host and "others" in host and "memory (GiB)" in host
    details = host[host.index('<details class="allfields">') :]
    assert "load1" in details and "load1" not in host[: host.index('<details class="allfields">')]
    assert "16.00 GiB" in host  # mem_total_bytes, a constant


def test_generic_probe_section_for_an_unknown_probe(html):
    section = html[html.index("probe: custom") :]
    section = section[: section.index("</section>")]
    assert "10 samples of probes/custom.jsonl" in section
    assert "<td>util.gpu1</td><td>2</td>" in section  # a constant in the small table
    assert "gpu0" in section and "temp_c" in section  # plotted field groups and lines
    assert "state: &lt;script&gt;" in section  # text fields listed, escaped


def test_hover_data_is_attached_to_time_figures(html):
    blobs = re.findall(r"data-hover='([^']*)'", html)
    assert len(blobs) >= 4
    hover = [json.loads(b.replace("&#39;", "'").replace("&amp;", "&").replace("&quot;", '"')) for b in blobs]
    assert all({"x0", "x1", "l", "r", "t", "panels"} <= set(h) for h in hover)
    server = next(h for h in hover if any(p["title"] == "KV cache usage (%)" for p in h["panels"]))
    kv = next(p for p in server["panels"] if p["title"] == "KV cache usage (%)")
    assert kv["lines"]["KV usage"][:2] == [10.0, 12.0] and 0 < kv["y0"] < kv["y1"] <= 1


def test_markdown_leads_with_the_answer_and_escapes(report):
    md = report[1]["md"].read_text()
    assert "<script>" not in md and "&lt;script&gt;" in md and "<img" not in md
    assert md.index("## Answer") < md.index("## Findings") < md.index("## Summary")
    assert "**Highest load within the SLO**" in md and "expected difference(s), explained" in md
    assert "## Metric definitions" in md and "GenAI-Perf" in md


def test_no_probe_files_no_section(tmp_path):
    run = make_run(tmp_path / "r", [rec(0, 0.1, 0.5, 11)], {"c1": (0, 1)})
    _, paths = write_reports(run)
    assert "No probe data in this run" in paths["html"].read_text()


def _section(html: str, title: str) -> str:
    part = html[html.index(f"<h3>{title}</h3>") :]
    return part[: part.index("</section>")]


def test_gpu_tcp_and_irq_panels(html):
    gpu = _section(html, "GPU")
    for title in (
        "GPU utilization (%)",
        "GPU memory used (GiB)",
        "GPU power (W)",
        "SM clock (MHz)",
        "throttle reasons (1 = active)",
        "GPU 0: SW power cap",
        "GPU 1",
    ):
        assert title in gpu, title
    tcp = _section(html, "network: TCP")
    for title in (
        "target connections' retransmits (/s)",
        "target connections' RTT (ms)",
        "host-wide TCP retransmits (/s, context)",
    ):
        assert title in tcp, title
    irq = _section(html, "network: NIC interrupts")
    assert "NIC interrupts per core (/s)" in irq and "cpu 0" in irq
    assert "NIC interrupts on the busiest core (%)" in irq  # flat at 100%: in the constants table
