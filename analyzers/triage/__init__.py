"""`llmdiag p99`: why the tail is what it is. Spike windows, then network, scheduling and host checks, ranked."""
