"""Parsers against this machine's real /proc files and recorded samples of other machines."""

import os

import pytest

from probes import procfs
from probes.interrupts import classify, delta_lines, parse_interrupts, summarize
from probes.netstat import parse_counter_pairs, parse_ss, port_of

DATA = os.path.join(os.path.dirname(__file__), "data")


def _data(name):
    return open(os.path.join(DATA, name)).read()


def test_real_proc_stat_meminfo_loadavg_and_own_process():
    cpus = procfs.parse_proc_stat_cpus(open("/proc/stat").read())
    assert "cpu" in cpus and f"cpu{os.cpu_count() - 1}" in cpus
    assert all(0 <= busy <= total for busy, total in cpus.values())
    mem = procfs.parse_meminfo(open("/proc/meminfo").read())
    assert mem["MemTotal"] > mem["MemAvailable"] > 0 and mem["MemTotal"] % 1024 == 0
    assert procfs.parse_loadavg(open("/proc/loadavg").read()) is not None
    st = procfs.parse_pid_stat(open(f"/proc/{os.getpid()}/stat").read())
    assert st["num_threads"] >= 1 and st["rss_pages"] > 0 and 0 <= st["last_cpu"] < os.cpu_count()
    lists = procfs.parse_status_lists(open(f"/proc/{os.getpid()}/status").read())
    assert procfs.parse_cpulist(lists["Cpus_allowed_list"])


def test_pid_stat_with_spaces_and_parens_in_the_name():
    text = "42 (my (odd) name) S " + " ".join(str(i) for i in range(4, 53))
    st = procfs.parse_pid_stat(text)
    assert st == {
        "comm": "my (odd) name",
        "ppid": 4,
        "utime": 14,
        "stime": 15,
        "num_threads": 20,
        "rss_pages": 24,
        "last_cpu": 39,
    }


def test_cpu_busy_pct_from_two_readings():
    a = procfs.parse_proc_stat_cpus("cpu0 100 0 100 800 0 0 0 0 0 0\n")
    b = procfs.parse_proc_stat_cpus("cpu0 150 0 150 900 0 0 0 0 0 0\n")
    assert procfs.cpu_busy_pct(a, b) == {"cpu0": 50.0}


def test_cpulist_and_numa_maps():
    assert procfs.parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    maps = (
        "7f00 default anon=10 dirty=10 N0=6 N1=4 kernelpagesize_kB=4\n"
        "7f10 bind:1 huge anon=2 N1=2 kernelpagesize_kB=2048\n"
    )
    assert procfs.parse_numa_maps(maps) == {"0": 6 * 4096, "1": 4 * 4096 + 2 * 2048 * 1024}


def test_real_proc_interrupts():
    ncpu, lines = parse_interrupts(open("/proc/interrupts").read())
    assert ncpu == os.cpu_count()
    assert any(x.irq == "LOC" for x in lines) and all(len(x.counts) == ncpu for x in lines)
    row = summarize(ncpu, delta_lines(lines, lines))
    assert row["irq_per_cpu"] == [0] * ncpu and row["nic_busiest_share"] is None


def test_64_core_interrupts_with_mlx5_queues():
    ncpu, lines = parse_interrupts(_data("interrupts_64core_mlx5.txt"))
    assert ncpu == 64
    row = summarize(ncpu, delta_lines([], lines))
    dev = row["devices"]["mlx5_comp@pci:0000:3b:00.0"]
    assert dev["nic"] and dev["irqs"] == 63 and dev["total"] == sum(1000 + q for q in range(63))
    assert row["devices"]["nvme0"]["nic"] is False and row["devices"]["nvme0"]["irqs"] == 9
    nic_total = sum(1000 + q for q in range(63)) + 7  # + mlx5_async0
    on_cpu5 = 1005 + sum(1000 + q for q in range(40, 48))  # queue 5 and queues 40..47
    assert row["nic_irq_total"] == nic_total and row["nic_busiest_cpu"] == 5
    assert row["nic_busiest_share"] == round(on_cpu5 / nic_total, 4)
    assert "LOC" not in row["devices"]  # timer ticks are not devices
    err = next(x for x in lines if x.irq == "ERR")
    assert err.counts == [0] * 64  # short rows are padded


@pytest.mark.parametrize(
    "name,device,nic",
    [
        ("mlx5_comp12@pci:0000:3b:00.1", "mlx5_comp@pci:0000:3b:00.1", True),
        ("ens5-TxRx-3", "ens5", True),
        ("i40e-eth0-TxRx-7", "i40e-eth0", True),
        ("eth0-rx-2", "eth0", True),
        ("virtio2-input.0", "virtio2", True),
        ("virtio2-output.0", "virtio2", True),
        ("nvme0q3", "nvme0", False),
        ("ttyS0", "ttyS", False),
        ("ACPI:Ged", "ACPI:Ged", False),
    ],
)
def test_device_classification(name, device, nic):
    assert classify(name) == (device, nic)


def test_interrupt_deltas_count_from_the_previous_reading():
    a = "      CPU0  CPU1\n 40:  10  20  PCI-MSI 1-edge eth0-TxRx-0\n"
    b = "      CPU0  CPU1\n 40:  15  80  PCI-MSI 1-edge eth0-TxRx-0\n"
    n, la = parse_interrupts(a)
    _, lb = parse_interrupts(b)
    row = summarize(n, delta_lines(la, lb))
    assert row["nic_irq_per_cpu"] == [5, 60] and row["nic_busiest_cpu"] == 1
    assert row["nic_busiest_share"] == round(60 / 65, 4)


def test_real_snmp_and_netstat():
    c = parse_counter_pairs(open("/proc/net/snmp").read())
    c.update(parse_counter_pairs(open("/proc/net/netstat").read()))
    assert c["Tcp.OutSegs"] >= c["Tcp.RetransSegs"] >= 0
    assert "TcpExt.TCPOrigDataSent" in c and "TcpExt.TCPTimeouts" in c and "Ip.Forwarding" in c


def test_ss_with_retransmits():
    conns = parse_ss(_data("ss_retrans.txt"))
    assert len(conns) == 2
    bad, good = conns
    assert bad["retrans_current"] == 1 and bad["retrans_total"] == 4 and bad["lost"] == 1
    assert bad["rtt_ms"] == 181.2 and bad["rttvar_ms"] == 40.5 and bad["bytes_retrans"] == 35792
    assert "retrans_total" not in good and good["rtt_ms"] == 0.5 and port_of(good["peer"]) == 8000


def test_ss_without_state_column():
    text = "0 0 [::ffff:127.0.0.1]:5000 [::ffff:127.0.0.1]:8000\n\t cubic rtt:0.1/0.05 retrans:0/2\n"
    (c,) = parse_ss(text)
    assert c["state"] is None and port_of(c["peer"]) == 8000 and c["retrans_total"] == 2
