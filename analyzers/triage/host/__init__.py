"""P99 checks of the host, last in the seed's order: CPU by process (the server's own, the load
generator's, other processes' named), run-queue pressure, and GPUs throttling their clocks.

cpu.py is the CPU check; neighbour.py finds a noisy neighbour three ways (what each request lived
through, the spike windows against the calm, a neighbour held through a whole level);
other_processes.py reads other processes' CPU per interval; gpu_throttle.py is the GPU clock check.
"""
