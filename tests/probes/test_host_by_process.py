"""The host probe's CPU by process on real processes: the server's tree, the load generator (this
process and its children) and other processes, named; PSI and steal where the kernel has them."""

import os
import subprocess
import sys
import time

import pytest

from probes.base import ProbeContext
from probes.host import HostProbe
from probes.proc_cpu import ProcessCpuTracker, descendants, read_processes

BURN = [sys.executable, "-c", "import time\nend = time.time() + 20\nwhile time.time() < end: pass"]


def _sample_after(probe: HostProbe, seconds: float) -> dict:
    time.sleep(seconds)
    return probe.sample()


def test_server_client_and_others_are_told_apart(tmp_path):
    server = subprocess.Popen(BURN)  # the "server": a child of this process
    client_child = subprocess.Popen(BURN)  # a load-generator child
    # Not ours: a process whose parent exited, so it is nobody's child here (another process on the host).
    spawn = (
        f"import subprocess; print(subprocess.Popen({BURN!r}, start_new_session=True, "
        "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
    )
    other_pid = int(subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True, check=True).stdout)
    try:
        probe = HostProbe(ProbeContext(out_dir=tmp_path, server_pid=server.pid))
        probe.check()
        rows = [r for r in (_sample_after(probe, 1.0) for _ in range(3)) if r]
        row = rows[-1]
        for key in ("server_cpu_cores", "client_cpu_cores", "others_cpu_cores", "top_others"):
            assert key in row, row.keys()
        # three busy loops share this machine's cores: each gets a fair share at least
        ncores = len(row["cpu_per_core_pct"])
        floor = 0.15 * min(1.0, ncores / 3)
        assert row["server_cpu_cores"] >= floor and row["client_cpu_cores"] >= floor, row
        assert row["others_cpu_cores"] >= floor, row
        named = {p["pid"] for p in row["top_others"]}
        assert other_pid in named, row["top_others"]
        assert server.pid not in named and client_child.pid not in named
        if os.path.exists("/proc/pressure/cpu"):
            assert 0 <= row["cpu_pressure_some_avg10"] <= 100 and 0 <= row["cpu_pressure_some_share"] <= 1
        assert 0 <= row.get("cpu_steal_pct", 0) <= 100
    finally:
        for p in (server, client_child):
            p.kill()
            p.wait()
        os.kill(other_pid, 9)


def test_explicit_client_pids_and_the_process_tree(tmp_path):
    child = subprocess.Popen(BURN)
    try:
        procs = read_processes(__import__("pathlib").Path("/proc"))
        assert child.pid in descendants({os.getpid()}, procs)
        tracker = ProcessCpuTracker(__import__("pathlib").Path("/proc"), None, [child.pid], os.sysconf("SC_CLK_TCK"))
        assert tracker.sample(0.0, None) is None  # the baseline
        time.sleep(1.0)
        cpu = tracker.sample(1.0, None)
        assert cpu.server_cpu_cores is None and cpu.client_cpu_cores > 0.1
        assert child.pid not in {p["pid"] for p in cpu.top_others}
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("who", ["server", "client"])
def test_a_processs_own_wait_for_a_cpu_grows_with_a_neighbour(tmp_path, who):
    """schedstat's run-queue wait of the server's threads (or the load generator's: a client that waits
    for a CPU reads its streams late, which tells it from a server that sent them in bursts): small
    alone, most of its runnable time beside more busy loops than there are cores."""
    watched = subprocess.Popen(BURN)
    neighbours: list[subprocess.Popen] = []
    try:
        ctx = (
            ProbeContext(out_dir=tmp_path, server_pid=watched.pid)
            if who == "server"
            else ProbeContext(out_dir=tmp_path, client_pids=[watched.pid])
        )
        probe = HostProbe(ctx)
        probe.check()
        probe.sample()
        alone = _sample_after(probe, 1.0)
        neighbours = [subprocess.Popen(BURN) for _ in range(3 * (os.cpu_count() or 1))]
        probe.sample()
        crowded = _sample_after(probe, 1.5)
        share = f"{who}_cpu_wait_share"
        assert 0.0 <= alone[share] <= 1.0 and alone[f"{who}_cpu_wait_cores"] >= 0.0
        assert crowded[share] > 0.5, crowded
        assert crowded[share] > alone[share]
    finally:
        for p in (watched, *neighbours):
            p.kill()
            p.wait()


def test_a_fleets_other_replicas_are_the_servers_cpu_not_a_neighbours(tmp_path):
    """Replicas driven directly (sweep --target URL1,URL2): the second replica's process is named as
    a replica of the server, so its busy loop counts as the server's, never as another process's."""
    first, second = subprocess.Popen(BURN), subprocess.Popen(BURN)
    try:
        tracker = ProcessCpuTracker(
            __import__("pathlib").Path("/proc"), first.pid, None, os.sysconf("SC_CLK_TCK"), replica_pids=[second.pid]
        )
        assert tracker.sample(0.0, None) is None
        time.sleep(1.0)
        cpu = tracker.sample(1.0, None)
        assert second.pid not in {p["pid"] for p in cpu.top_others}
        assert cpu.server_cpu_cores >= 0.3 * min(1.0, os.cpu_count() / 2), cpu  # both loops are the server's
        probe = HostProbe(ProbeContext(out_dir=tmp_path, server_pid=first.pid, replica_pids={"1": second.pid}))
        probe.check()
        row = [r for r in (_sample_after(probe, 1.0) for _ in range(2)) if r][-1]
        assert second.pid not in {p["pid"] for p in row["top_others"]}, row["top_others"]
    finally:
        for p in (first, second):
            p.kill()
            p.wait()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores to pin two replicas apart")
def test_each_replicas_own_wait_tells_which_one_a_pinned_neighbour_starves(tmp_path):
    """Two replicas, each a busy loop pinned to a core of its own; two more busy loops pinned to replica
    1's core. Each replica's own wait is read apart (`per_replica`, by its index in the URLs): replica 1
    waits for its core, replica 0 does not. The server's fields (the first URL's) cannot say it."""
    pinned = lambda core: ["taskset", "-c", str(core), *BURN]
    replicas = [subprocess.Popen(pinned(0)), subprocess.Popen(pinned(1))]
    neighbours = [subprocess.Popen(pinned(1)) for _ in range(2)]
    try:
        probe = HostProbe(
            ProbeContext(out_dir=tmp_path, server_pid=replicas[0].pid, replica_pids={"1": replicas[1].pid})
        )
        probe.check()
        rows = [r for r in (_sample_after(probe, 1.0) for _ in range(3)) if r]
        per = rows[-1]["per_replica"]
        assert set(per) == {"0", "1"}, per
        # Three loops on one core: each runs a third of the time and waits two thirds.
        assert per["1"]["cpu_wait_share"] > 0.4, per
        assert per["0"]["cpu_wait_share"] < per["1"]["cpu_wait_share"] / 2, per
        assert rows[-1]["server_cpu_wait_share"] == pytest.approx(per["0"]["cpu_wait_share"], abs=0.15)
    finally:
        for p in (*replicas, *neighbours):
            p.kill()
            p.wait()
