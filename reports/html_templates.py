"""Jinja2 templates of the HTML reports, shipped as package data in reports/templates/: the page
frame (base.html), the shared macros (macros.html), the report's and the comparison's bodies
(report.html, compare.html, runs.html), the stylesheet (report.css) and the one script (hover.js).

Self-contained by construction: the CSS is inlined, figures are inline SVG, the one script is the
report's own hover script, inlined too, and nothing has a `src` or `href` that leaves the file.
The environment autoescapes, so everything from the run (model names, level ids, error strings,
the command line) renders as text; only the SVG made by reports.plots is marked safe, and hover
data goes out through `tojson` (which escapes <, >, & and ').
"""

from __future__ import annotations

import functools
from importlib.resources import files

from jinja2 import DictLoader, Environment, select_autoescape

_TEMPLATES = {
    "base": "base.html",
    "macros": "macros.html",
    "report": "report.html",
    "compare": "compare.html",
    "runs": "runs.html",
}


def _read(name: str) -> str:
    return (files("reports") / "templates" / name).read_text(encoding="utf-8")


@functools.lru_cache(maxsize=None)
def stylesheet() -> str:
    return _read("report.css")


@functools.lru_cache(maxsize=None)
def hover_script() -> str:
    return _read("hover.js")


@functools.lru_cache(maxsize=None)
def environment() -> Environment:
    return Environment(
        loader=DictLoader({key: _read(name) for key, name in _TEMPLATES.items()}),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
