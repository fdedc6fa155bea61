"""report.html and compare.html in a real headless browser: the DOM has the sections (the run's text
as text, not nodes) and a screenshot shows the answer box at the top. Skipped without chromium.
Set LLMBENCH_SCREENSHOT_DIR to keep the screenshots (they are meant to be looked at)."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from report_run import make_report

from reports.write import write_compare


def _browser() -> str | None:
    return next(
        (
            shutil.which(b)
            for b in ("chromium", "chromium-headless-shell", "chromium-browser", "google-chrome")
            if shutil.which(b)
        ),
        None,
    )


pytestmark = pytest.mark.skipif(_browser() is None, reason="no headless browser installed (.ci/run installs chromium)")


def _chromium(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            _browser(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def diagnosed(tmp_path_factory):
    return make_report(tmp_path_factory.mktemp("shot") / "run", diagnosed=True)


def test_dom_has_the_sections_and_text_stays_text(diagnosed, tmp_path):
    proc = _chromium(tmp_path, "--dump-dom", diagnosed[1]["html"].as_uri())
    dom = proc.stdout
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert 'id="answer"' in dom and 'id="summary-table"' in dom and "TTFT P50/P99 ms" in dom
    assert dom.lower().count("<script") == 1 and "&lt;script&gt;alert(1)" in dom  # the model name is text
    assert 'class="tip"' in dom  # the hover script ran and added its box


def test_screenshot_of_the_report_and_the_comparison(diagnosed, tmp_path):
    from PIL import Image

    out = Path(os.environ.get("LLMBENCH_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    slower, _ = make_report(tmp_path / "slower", diagnosed=False, slow=1.5)  # TTFT 1.5× above c1
    _, cmp_paths = write_compare([diagnosed[0], slower], tmp_path / "cmp")
    compare = cmp_paths["html"].read_text()
    verdict = compare[compare.index('id="verdict-1"') : compare.index('id="matrix-1"')]
    # c1: unchanged; c4's TTFT P99 reaches its failed request in both runs (unbounded: no verdict), its P50 does not
    assert "B is worse than A" in verdict and "TTFT P99: c16 +50.0%" in verdict and "TTFT P50: c4 +50.0%" in verdict
    for name, page in (("report", diagnosed[1]["html"]), ("compare", cmp_paths["html"])):
        png = out / f"{name}.png"
        proc = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,2400", page.as_uri())
        assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
        img = Image.open(png).convert("RGB")
        assert img.size == (1400, 2400)
        top = img.crop((0, 0, 1400, 500))
        assert len(top.getcolors(maxcolors=1 << 16) or []) > 20  # text drawn, not a blank page
        assert any(c == (250, 251, 253) for _, c in top.getcolors(maxcolors=1 << 16))  # the answer box


@pytest.mark.slow  # ~6s; .ci/run runs it (the default suite keeps under 10 minutes)
def test_runs_together_in_the_browser(diagnosed, tmp_path):
    """runs.html (`llmbench report --runs`): both figures drawn, a legend line per run, no script."""
    from PIL import Image

    from reports.write import write_runs_report

    slower, _ = make_report(tmp_path / "slower", diagnosed=False, slow=1.5)
    _, page = write_runs_report([diagnosed[0], slower], tmp_path / "runs")
    proc = _chromium(tmp_path, "--dump-dom", page.as_uri())
    dom = proc.stdout
    assert proc.returncode == 0 and 'id="frontier-fig"' in dom and 'id="throughput-latency-fig"' in dom
    assert "<script" not in dom.lower() and dom.count("<svg") == 2
    assert dom.count("· concurrency · in 10 · out 11") >= 2 * 2  # each run in each legend
    out = Path(os.environ.get("LLMBENCH_SCREENSHOT_DIR") or tmp_path)
    out.mkdir(parents=True, exist_ok=True)
    png = out / "runs.png"
    proc = _chromium(tmp_path, f"--screenshot={png}", "--window-size=1400,2000", page.as_uri())
    assert proc.returncode == 0 and png.is_file(), proc.stderr[-2000:]
    figs = Image.open(png).convert("RGB").crop((0, 300, 1400, 1600))
    assert len(figs.getcolors(maxcolors=1 << 16) or []) > 50  # lines and text drawn
