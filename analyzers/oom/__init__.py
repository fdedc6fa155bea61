"""`llmdiag oom`: OOM messages of PyTorch and the engines explained, memory pressure in a run, the fixes in order."""
