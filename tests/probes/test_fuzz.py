"""Property-based fuzzing: every parser survives garbage (no exception other than the documented
ValueError/ProbeInputError), and text that resembles the real format."""

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from probes import procfs
from probes.base import ProbeInputError
from probes.gpu import decode_throttle
from probes.interrupts import delta_lines, parse_interrupts, summarize
from probes.netstat import parse_counter_pairs, parse_ss
from probes.pcap_analysis import analyze_pcap
from probes.prom import parse_metrics, quantile
from probes.stacks import parse_dump

FUZZ = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Text made of the characters these files use, so the fuzzer reaches past the first check.
procish = st.text(alphabet='0123456789 \t\n:-,.()_abcCPUNxyzTcpExt#{}="+Inf', max_size=600)
anytext = st.one_of(st.text(max_size=400), procish)


@FUZZ
@given(anytext)
def test_procfs_parsers(text):
    a = procfs.parse_proc_stat_cpus(text)
    procfs.cpu_busy_pct(a, procfs.parse_proc_stat_cpus(text[::-1]))
    procfs.parse_meminfo(text)
    procfs.parse_loadavg(text)
    procfs.parse_pid_stat(text)
    procfs.parse_status_lists(text)
    assert all(isinstance(c, int) for c in procfs.parse_cpulist(text))
    procfs.parse_numa_maps(text)


@FUZZ
@given(anytext, anytext)
def test_interrupts_parser(a, b):
    n, la = parse_interrupts(a)
    _, lb = parse_interrupts(b)
    row = summarize(n, delta_lines(la, lb))
    assert len(row["irq_per_cpu"]) == n
    share = row["nic_busiest_share"]
    assert share is None or 0 < share <= 1


@FUZZ
@given(anytext)
def test_netstat_and_ss_parsers(text):
    assert all(isinstance(v, int) for v in parse_counter_pairs(text).values())
    parse_ss(text)


@FUZZ
@given(anytext)
def test_metrics_parser_raises_only_valueerror(text):
    try:
        snap = parse_metrics(text)
    except ValueError:
        return
    for h in snap.histograms.values():
        for q in (0.5, 0.99):
            quantile(h, q)


@FUZZ
@given(anytext)
def test_py_spy_dump_parser(text):
    try:
        parse_dump(text)
    except ValueError:
        pass


@FUZZ
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_throttle_decoder(mask):
    assert isinstance(decode_throttle(mask), list)


@FUZZ
@given(st.binary(max_size=300), st.booleans())
def test_pcap_reader_on_garbage(tmp_path, blob, with_header):
    path = tmp_path / "fuzz.pcap"
    header = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1) if with_header else b""
    path.write_bytes(header + blob)
    try:
        analyze_pcap(str(path))
    except ProbeInputError:
        assert not with_header  # a valid header is never refused; a bad body is partial results
