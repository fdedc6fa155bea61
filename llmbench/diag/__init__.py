"""The `llmdiag` commands: oom (and its KV ramp), plan, p99, probe, comm, pcap."""
