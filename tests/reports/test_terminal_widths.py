"""Every command's terminal output at 80, 100 and 160 columns (issue 27): no number or identifier is
split across lines or cut, nothing is truncated with "…", and no line is wider than the terminal.

Each command runs for real (Typer's CliRunner, the real app) on a real input, its console swapped for
one of a forced width, as a terminal of that width would give it. "Split" is checked against the
same command at 1,000 columns, where nothing wraps: every token with a digit or an underscore at a
narrow width must be a whole token of the wide output ("1," and "024" are not, "1,024" is)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from llmbench.cli import app as llmbench_app
from llmbench.diag_cli import app as llmdiag_app
from reports.grid import Column, Grid, layout, needed_width

WIDTHS = (80, 100, 160)
WIDE = 1000
_SPLIT = re.compile(r"[\s│┃║|─━┏┓┗┛┡┩╇┳┻╋┠┨┼┌┐└┘├┤┬┴]+")


def _tokens(text: str) -> set[str]:
    """Numbers and identifiers of the output: tokens with a digit or "_", edge punctuation off."""
    out = set()
    for tok in _SPLIT.split(text):
        tok = tok.strip(",.;:()[]*")
        if tok and re.search(r"[\d_]", tok):
            out.add(tok)
    return out


def _console(width: int, pipe: bool = False) -> Console:
    console = Console(file=io.StringIO(), width=width, color_system=None, record=True)
    console.soft_wrap = pipe  # a pipe: make_console's setting (no hard wraps)
    return console


def run_cli(monkeypatch, app, modules: list[str], args: list[str], width: int, pipe: bool = False) -> str:
    console = _console(width, pipe)
    for name in modules:
        monkeypatch.setattr(sys.modules[name], "console", console)
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output + repr(result.exception)
    return re.sub(r" in \d+(\.\d+)? s\n", "\n", console.export_text())  # "wrote ... in 1.2 s": a timing


def check_widths(monkeypatch, app, modules: list[str], args: list[str]) -> dict[int, str]:
    wide = _tokens(run_cli(monkeypatch, app, modules, args, WIDE))
    outputs = {}
    for width in WIDTHS:
        text = outputs[width] = run_cli(monkeypatch, app, modules, args, width)
        assert "…" not in text, text
        too_wide = [line for line in text.splitlines() if len(line.rstrip()) > width]
        assert not too_wide, too_wide
        broken = _tokens(text) - wide
        assert not broken, f"split at {width} columns: {sorted(broken)}\n{text}"
    piped = run_cli(monkeypatch, app, modules, args, 80, pipe=True)  # `| less`, a CI log: nothing cut
    assert "…" not in piped and not _tokens(piped) - wide, sorted(_tokens(piped) - wide)
    return outputs


@pytest.fixture(scope="module")
def standing_run(tmp_path_factory):
    """A real run directory with a standing TTFT tail (the server queued 14 requests behind 2)."""
    from test_standing_tails import two_levels

    return two_levels(tmp_path_factory.mktemp("standing"), dict(running=2, waiting=14, queue_s=3.2, prefill_s=13.7))


def test_llmdiag_p99_reads_at_every_width(monkeypatch, standing_run):
    outputs = check_widths(
        monkeypatch, llmdiag_app, ["llmbench.diag.p99"], ["p99", str(standing_run.path), "--no-save"]
    )
    text = outputs[80]
    assert "evidenc\n" not in text and "thresho\n" not in text  # the words of the playbook stay whole
    assert "Evidence for #1:" in text and "The host's CPU was" in " ".join(text.split())
    evidence = text.split("Evidence for #1:")[1].split("playbook p99")[0]
    lines = [line for line in evidence.splitlines() if line.strip().startswith("·")]
    assert 3 <= len(lines) <= 5, evidence
    assert "ms" in evidence and " s " in evidence.replace("\n", " ")  # sentences with units, not a dump


def test_llmdiag_oom_reads_at_every_width(monkeypatch):
    outputs = check_widths(
        monkeypatch,
        llmdiag_app,
        ["llmbench.diag.oom"],
        [
            "oom",
            "--model",
            "llama-3-70b",
            "--tp",
            "2",
            "--max-model-len",
            "1024",
            "-c",
            "128",
            "--max-num-seqs",
            "1271",
        ],
    )
    assert "max_model_len=1,024" in outputs[100] or "1,024" in outputs[100]
    assert "max_num_seqs=1271" in outputs[100]
    logs = Path(__file__).resolve().parent.parent / "analyzers" / "oom" / "oom_logs"
    for log in ("cuda_error.log", "vllm_max_len.log", "torch_new.log"):
        check_widths(monkeypatch, llmdiag_app, ["llmbench.diag.oom"], ["oom", "--log", str(logs / log)])


def test_llmdiag_plan_reads_at_every_width(monkeypatch):
    outputs = check_widths(
        monkeypatch,
        llmdiag_app,
        ["llmbench.diag.plan"],
        ["plan", "--model", "llama-3-70b", "--nodes", "2", "--top", "6"],
    )
    assert "239,536" in outputs[160] and "239,536" in outputs[80]


@pytest.mark.slow  # ~8s; .ci/run runs it (the default suite keeps under 10 minutes)
def test_llmdiag_plans_predicted_ranking_reads_at_every_width(monkeypatch):
    """The table ranked on predicted goodput: its headers said which percentiles only when wide
    ("TTFT P50/P… ms" at 80 columns) before it was a Grid."""
    args = ["plan", "--model", "llama-3-8b", "--profile", "h100", "--top", "2", "-c", "8"]
    outputs = check_widths(
        monkeypatch, llmdiag_app, ["llmbench.diag.plan"], args + ["--input-len", "256", "--output-len", "16"]
    )
    assert "P50/P99" in outputs[80] and "goodput" in outputs[80]


def check_renders(draw) -> dict[int, str]:
    """`draw(console)` at 1,000 columns, then at each width and into a pipe: the same checks as a command."""
    wide_console = _console(WIDE)
    draw(wide_console)
    wide = _tokens(wide_console.export_text())
    outputs = {}
    for width, pipe in [(w, False) for w in WIDTHS] + [(80, True)]:
        console = _console(width, pipe)
        draw(console)
        text = console.export_text()
        assert "…" not in text and not _tokens(text) - wide, (width, sorted(_tokens(text) - wide), text)
        assert pipe or max(len(line.rstrip()) for line in text.splitlines()) <= width, text
        outputs[width if not pipe else -width] = text
    return outputs


def test_the_sweeps_end_reads_at_every_width(standing_run):
    """What the sweep prints at its end (llmbench/sweep/run.py `_finish`, and `llmbench report`): the
    summary table, then the answer, whose diagnosis evidence is a few sentences, not a key-value dump."""
    from analyzers.summary import analyze_run
    from analyzers.triage.p99 import diagnose_p99
    from reports.answer import build_answer
    from reports.grid import print_grid
    from reports.terminal import print_answer, run_summary_table

    summary, _ = analyze_run(standing_run)
    diagnosis = diagnose_p99(standing_run).to_dict()

    def draw(console):
        print_grid(console, run_summary_table(summary))
        print_answer(console, build_answer(summary, diagnosis))

    outputs = check_renders(draw)
    for text in (outputs[80], outputs[-80]):
        why = text.split("Why the tail:")[1].split("Validity:")[0]
        bullets = [line for line in why.splitlines() if line.strip().startswith("·")]
        assert 3 <= len(bullets) <= 5, why
        flat = " ".join(why.split())
        assert "server queue time mean" not in flat and "ttft count" not in flat  # no key-value dump
        assert "mean TTFT of" in flat and "14.0 waiting" in flat and " ms" in flat and " s " in flat, flat
    assert "goodput" in outputs[160].split("*")[0] and "goodput" not in outputs[80].split("*")[0]


def test_the_comparison_reads_at_every_width(tmp_path):
    from synth_run import make_run, rec

    from analyzers.compare import compare_runs
    from analyzers.summary import analyze_run
    from reports.compare_answer import compare_answer
    from reports.grid import print_grid
    from reports.terminal import compare_table, print_answer

    def run(name, slow):
        records = [
            rec(
                start + 0.1 * i,
                ttft * slow * (1 + 0.01 * (i % 7)),
                ttft * slow + 0.4,
                11,
                level=level,
                concurrency=c,
                itl=[0.04] * 9,
            )
            for level, c, start, ttft in (("c1", 1, 0, 0.1), ("c16", 16, 5, 0.63))
            for i in range(40)
        ]
        records += [
            rec(9 + 0.1 * i, None, None, 11, status="error", level="c16", concurrency=16, kind="connect")
            for i in range(2)
        ]
        return make_run(tmp_path / name, records, {"c1": (0, 4), "c16": (5, 9.5)})

    c = compare_runs(analyze_run(run("a", 1.0)), analyze_run(run("b", 1.3)))

    def draw(console):
        print_grid(console, compare_table(c))
        print_answer(console, compare_answer(c))

    outputs = check_renders(draw)
    assert "95% CI of B − A" in outputs[160] and "95% CI of B − A" not in outputs[80]  # left to compare.html
    assert "unbounded" in outputs[80] and "worse" in outputs[80]


@pytest.mark.slow
def test_llmbench_report_compare_and_runs_commands_read_at_every_width(monkeypatch, tmp_path):
    """The commands themselves (each writes its report files, so this takes ~20 s)."""
    from report_run import make_report

    a, _ = make_report(tmp_path / "a", diagnosed=True)
    b, _ = make_report(tmp_path / "b", diagnosed=False, slow=1.3)
    outputs = check_widths(monkeypatch, llmbench_app, ["llmbench.report"], ["report", str(a.path)])
    assert "Why the tail" in outputs[80]
    check_widths(
        monkeypatch,
        llmbench_app,
        ["llmbench.report"],
        ["compare", str(a.path), str(b.path), "--out", str(tmp_path / "cmp")],
    )
    check_widths(monkeypatch, llmbench_app, ["llmbench.runs"], ["runs", str(tmp_path)])


def test_llmdiag_comm_table_reads_at_every_width(monkeypatch):
    from llmbench.diag import probe
    from probes.comm_table import make_row

    rows = [make_row("all_reduce", 2**k, 2**k // 4, "float32", 2, [1e-5 * k, 1.2e-5 * k]) for k in range(10, 27, 4)]
    wide_console = _console(WIDE)
    monkeypatch.setattr(probe, "console", wide_console)
    probe.print_comm_table(rows, 2, "gloo", None)
    wide = _tokens(wide_console.export_text())
    for width in WIDTHS:
        console = _console(width)
        monkeypatch.setattr(probe, "console", console)
        probe.print_comm_table(rows, 2, "gloo", None)
        text = console.export_text()
        assert "…" not in text and not _tokens(text) - wide and max(len(x) for x in text.splitlines()) <= width


def _grid() -> Grid:
    grid = Grid("t", [Column("id", wrap=False), Column("value", "right"), Column("evidence")])
    grid.add_row("p99.net.link-saturation", "1,414,212", "no probe records NIC bytes/s against link speed yet")
    grid.add_row("p99.sched.policy", "239,536", "FCFS with long and short requests mixed punishes the short ones")
    return grid


def test_a_grid_is_a_table_down_to_its_width_and_blocks_below():
    grid = _grid()
    need = needed_width(grid)

    def render(width):
        console = _console(width)
        console.print(layout(grid, console))
        return console.export_text()

    at, below = render(need), render(need - 1)
    assert "┃" in at and "┃" not in below  # a table exactly down to the width it needs
    for text, width in ((at, need), (below, need - 1)):
        assert max(len(line.rstrip()) for line in text.splitlines()) <= width
        for token in ("p99.net.link-saturation", "1,414,212", "239,536", "evidence", "punishes"):
            assert any(token in line for line in text.splitlines()), (token, text)
    assert "id: p99.sched.policy" in below and "  value: 239,536" in below  # one record a block


def test_blocks_in_a_pipe_keep_each_value_on_one_line():
    console = _console(40, pipe=True)
    console.print(layout(_grid(), console))
    text = console.export_text()
    assert "  evidence: FCFS with long and short requests mixed punishes the short ones\n" in text


def test_a_column_that_does_not_wrap_keeps_each_cell_on_one_line():
    grid = Grid("", [Column("plan", wrap=False), Column("note")], [["TP2 PP1 bf16", Text("below target")]])
    console = _console(needed_width(grid))
    console.print(layout(grid, console))
    assert "TP2 PP1 bf16" in console.export_text()


def test_llmdiag_pcap_reads_at_every_width(monkeypatch, tmp_path):
    from scapy.layers.inet import IP, TCP
    from scapy.layers.l2 import Ether
    from scapy.utils import wrpcap

    def seg(src, dst, flags, seq, ack=0):
        return Ether() / IP(src=src[0], dst=dst[0]) / TCP(sport=src[1], dport=dst[1], flags=flags, seq=seq, ack=ack)

    pkts = []
    for k in range(3):  # three flows, each with a duplicate ACK
        c, s = (f"192.168.100.{10 + k}", 51234 + k), ("10.200.30.40", 8000)
        pkts += [
            seg(c, s, "S", 1000),
            seg(s, c, "SA", 5000, 1001),
            seg(c, s, "A", 1001, 5001),
            seg(s, c, "A", 5001, 1001),
            seg(s, c, "A", 5001, 1001),
        ]
    wrpcap(str(tmp_path / "c.pcap"), pkts)
    outputs = check_widths(monkeypatch, llmdiag_app, ["llmbench.diag.probe"], ["pcap", str(tmp_path / "c.pcap")])
    assert "192.168.100.12:51236" in outputs[80]


def test_a_long_finding_in_a_narrow_column_is_a_block_not_a_tower_of_words():
    from reports.grid import MAX_CELL_LINES, Column, Grid

    finding = " ".join(["a noisy neighbour throughout c8 (100% of its 73 s): other processes held 1.6 of 2 cores"] * 3)
    grid = Grid(
        "findings",
        [Column("#", "right"), Column("category"), Column("finding"), Column("next step")],
        [["1", "host", finding, "rerun with the neighbour gone"]],
    )
    wide, narrow = _console(200), _console(60)
    wide.print(layout(grid, wide))
    narrow.print(layout(grid, narrow))
    assert "┃" in wide.export_text()  # fits in a few lines: a table
    text = narrow.export_text()
    assert "┃" not in text and "finding: a noisy neighbour" in text, text  # would wrap past MAX_CELL_LINES
    assert MAX_CELL_LINES < len(finding) // 14
