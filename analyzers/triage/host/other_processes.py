"""Other processes' CPU per probe interval, in cores: those the host probe named in /proc, and the busy
CPU nobody claims where the server felt it (its threads waited for a CPU)."""

from __future__ import annotations

import numpy as np

from analyzers.triage.evidence import SampleSplit

# The server felt contention in an interval when its own threads waited for a CPU this share of
# their runnable time (schedstat; alone beside its load generator on 2 cores they wait ~10-15%).
# That gates a neighbour held throughout a level, and busy CPU nobody in /proc claims.
SERVER_FELT_WAIT = 0.3
PSI_FELT = 0.5  # ... or, for runs without schedstat, some task waited this share of the time


def others_cpu_cores(host: SampleSplit, server: np.ndarray | None, ncores: int) -> np.ndarray | None:
    """Other processes' CPU per interval, in cores. The probe names the processes it finds in /proc;
    one that exited before the sample (a burner stopped mid-interval, a short job) took its ticks
    with it, yet /proc/stat counted them: what was busy beyond the server and the load generator is
    the others' too, named or not — counted where the target felt it (its threads waited for a
    CPU), since unnamed CPU can also be the load generator's own processes ending with a level."""
    if server is None:
        return host.values("others_cpu_cores") if host.has("others_cpu_cores") else None
    client = np.nan_to_num(host.values("client_cpu_cores")) if host.has("client_cpu_cores") else 0.0
    implied = np.clip(np.nan_to_num(host.values("cpu_pct")) / 100.0 * ncores - server - client, 0.0, None)
    if not host.has("others_cpu_cores"):  # older runs: all busy CPU minus the server's
        return implied
    visible = host.values("others_cpu_cores")
    if host.has("server_cpu_wait_share"):
        felt = np.nan_to_num(host.values("server_cpu_wait_share")) >= SERVER_FELT_WAIT
    elif host.has("cpu_pressure_some_share"):
        felt = np.nan_to_num(host.values("cpu_pressure_some_share")) >= PSI_FELT
    else:
        return visible
    return np.where(felt, np.fmax(visible, implied), visible)
