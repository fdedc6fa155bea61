"""Every file name of a run directory, in one place (docs/run-format.md describes each).

Writers and readers name these constants, never the strings, so a file cannot be called two
things in two modules.
"""

RUN_JSON = "run.json"  # RunInfo
REQUESTS_JSONL = "requests.jsonl"  # one RequestRecord per line
REQUESTS_INTERRUPTED_JSONL = "requests.interrupted.jsonl"  # first attempts of levels run again on resume
SUMMARY_JSON = "summary.json"  # per-level statistics (analyzers)
SUMMARY_CSV = "summary.csv"
REPORT_HTML = "report.html"  # the self-contained report
REPORT_MD = "report.md"
DIAGNOSIS_P99_JSON = "diagnosis_p99.json"  # `llmdiag p99`'s findings; the report shows them
PROBES_DIR = "probes"  # probes/<name>.jsonl time series
PROBE_COST_JSON = "_cost.json"  # inside PROBES_DIR: each probe's own CPU cost
CACHE_DIR = ".cache"  # derived data, always safe to delete
TABLE_CACHE_NPZ = "requests.npz"  # inside CACHE_DIR: the columnar copy of requests.jsonl
COMPARE_HTML = "compare.html"  # `llmbench compare` output folder
COMPARE_MD = "compare.md"
RUNS_HTML = "runs.html"  # `llmbench report --runs` output folder: several runs' curves
STACKS_SPEEDSCOPE = "stacks.speedscope.json"  # inside PROBES_DIR: `py-spy record` output
CAPTURE_PCAP = "capture.pcap"  # inside PROBES_DIR: the packet capture
PREDICTION_JSON = "prediction.json"  # a profile's prediction of each level (--profile)
CAPACITY_JSON = "capacity.json"  # `llmbench capacity`: the search, its probes and the answer
