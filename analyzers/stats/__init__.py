"""Latency and throughput statistics of a level: distributions, SLO verdicts, rates, scaling, token accounting."""
