"""Log text as people paste it, made readable for the OOM patterns.

Real logs carry a prefix on every line and get mangled on the way to an issue or a terminal:
- process prefixes of vLLM's workers: `(EngineCore pid=98) `, `(EngineCore_DP0 pid=6940) `,
  `(VllmWorker rank=0 pid=123) `, `(VllmWorkerProcess pid=214) `, `(APIServer pid=1) `,
  `(RayWorkerWrapper pid=1, ip=10.0.0.2) `, torchrun's `[rank7]: ` and `0: `;
- docker compose service names (`vllm-1  | `), journald (`Aug 19 18:34:30 host vllm[8707]: `),
  CI timestamps (`[2026-02-24T20:21:58Z] `), vLLM's logger (`ERROR 06-30 13:53:19 [core.py:515] `);
- Markdown quotes (`> `) of an issue comment; ANSI colours, as escape bytes or as the literal `^[[0;36m` a copy shows;
- HTML escaping from a web page (`&gt;&gt;`, `&#39;`);
- line wraps by the terminal, at a word or in the middle of one (`KV cach` / `e is needed`).

`variants(text)` returns the text with prefixes, colours and escapes removed, in three forms: line
by line, lines joined with a space (wraps at a word), and lines joined with nothing (wraps
mid-word). The parsers try each.
"""

from __future__ import annotations

import html
import re

_ANSI = re.compile(r"(?:\x1b|\^\[)\[[0-9;]*[A-Za-z]")
# One prefix at the start of a line; applied repeatedly, since they nest
# ("vllm-1  | (EngineCore pid=98) ERROR 06-30 13:53:19 [core.py:515] ...").
_PREFIXES = [
    re.compile(r"^>\s?"),  # a Markdown quote
    re.compile(r"^\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s*"),  # CI timestamp
    re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:.,]+Z?\s+\[\w+\]\s+\([^)]*\)\s*"),  # lemonade-style "(Process)"
    re.compile(r"^[A-Z][a-z]{2} +\d+ [\d:]+ \S+ [\w.-]+\[\d+\]:\s*"),  # journald
    re.compile(r"^[\w.-]+-\d+\s+\|\s?"),  # docker compose service
    re.compile(
        r"^\((?:EngineCore(?:_\w+)?|VllmWorker(?:Process)?|APIServer|RayWorkerWrapper|"
        r"Worker(?:_\w+)?|train_\w+|\w+)(?: rank=\d+)? pid=\d+(?:, ip=[\d.]+)?\)\s*"
    ),
    re.compile(
        r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+"
        r"(?:\[[\w./:-]+\]\s*|[\w.]+:\d+\]\s*)?"
    ),  # vLLM logger
    re.compile(r"^\[rank\d+\]:\s*"),  # torchrun
    re.compile(r"^\d+: (?=\S)"),  # srun/mpirun rank
    re.compile(r"^\[\d{4}-\d\d-\d\d [\d:]+(?: \w+\d*)*\]\s*"),  # SGLang "[date TP0]"
]


def strip_line(line: str) -> str:
    line = _ANSI.sub("", line).rstrip("\r")
    for _ in range(6):  # nested prefixes, a bounded number of times
        before = line
        for p in _PREFIXES:
            line = p.sub("", line)
        if line == before:
            break
    return line


def clean_lines(text: str) -> list[str]:
    """Prefixes, colours and HTML escapes off every line."""
    return [strip_line(line) for line in html.unescape(text).splitlines()]


def variants(text: str) -> list[str]:
    """Line by line, joined at words, joined mid-word (see the module docstring)."""
    lines = clean_lines(text)
    return ["\n".join(lines), " ".join(line.strip() for line in lines), "".join(lines)]
