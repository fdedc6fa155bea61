"""Streams read in one burst: the client fell behind the server, so its clock timed its own lag.

A client starved of CPU (issue 26: vLLM's busy front end and the load generator sharing two cores)
reads a stream late; by then the server has sent most of it, and the client reads every buffered
chunk back to back. Its TTFT then holds the client's wait and its TPOT is the time to parse
buffered lines (0.01 ms), not the server's decode step. Such a stream was not measured.

A stream is *read in a burst* (docs/metrics.md, "Streams read in a burst") when both hold:

- **its gaps are buffered reads**: more than half of its inter-chunk gaps (`itl_s`) are under
  max(BUFFERED_READ_S, FAR_BELOW x the server's own ITL mean over the level's window, from the
  server probe). A decode step produces each chunk, so a gap a tenth of the server's step, or
  one under 100 us (no engine steps that fast), is data that was waiting in the buffer;
- **it arrived in far less than its decode time**: its chunks span (sum of its gaps) under
  SPAN_SHARE of the time the server's decode takes, (tokens - 1) x the server's ITL mean, or,
  with no server ITL, (chunks - 1) x MIN_STEP_S. A server (or proxy) that bunches chunks but
  sends them as it decodes keeps its span; only a stream read after the fact loses it.

Whose lag it was: a client that fell behind waited for a CPU. Where the host probe read the load
generator's own run-queue wait (client_cpu_wait_share, docs/probes.md) over the level's window and it
was under CLIENT_WAITED of its runnable time, the client read each chunk when it came: the server sent
them so (its HTTP side held tokens its engine had made: a server whose event loop shares a core with
its compute thread, or with a torch worker spinning between ops), and the latencies are what a user of
it gets. Those streams are noted, and the level is measured (bench/burst_origin.py: a tiny-test server
and the load generator pinned to cores of their own still got 15 of 158 8-token streams in one burst,
and the rule named the client, which had a core to itself). Without the client's wait (no host probe,
or an older run) the bursts are the client's, as the rule was built for (issue 26: vLLM's front end
busy on the client's core).

Tokens come from usage, so a server that packs several tokens per chunk (vLLM's --stream-interval,
SGLang's) is not a burst: its gaps are several steps long, never shorter. A stream with fewer than
MIN_CHUNKS chunks has at most one gap, which cannot tell a burst from a fast step: it is counted as
not judged. A level fails (analyzers/validity.py) when at least LEVEL_SHARE of its judged streams,
and at least MIN_BURSTS of them, were read in bursts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyzers.probe_series import ProbeSeries, rows_covering
from rundir import RequestRecord
from rundir.table import RequestTable

BUFFERED_READ_S = 100e-6  # a read of a line already buffered takes tens of us; no decode step is this short
FAR_BELOW = 0.1  # a gap under a tenth of the server's own ITL mean did not wait for a step
MIN_STEP_S = 0.5e-3  # without the server's ITL: no engine decodes a chunk faster than this
SPAN_SHARE = 0.5  # "much shorter than its decode": under half of it
MIN_CHUNKS = 3  # two gaps at least: one gap cannot tell a burst from one fast step
MIN_SERVER_ITL_COUNT = 10  # fewer server ITL observations in the window are no reference
# A level fails at 5% of its judged streams: the TTFT tail the SLO judges (P99, P95) can then be
# made entirely of the client's own waits. And at 3 streams at least: one or two delayed by a
# passing hiccup (a GC pause in the client) are noted, not a failed level.
LEVEL_SHARE = 0.05
MIN_BURSTS = 3
# The load generator waited for a CPU at least this share of its runnable time over the window: it can
# have read late. Below it, it read each chunk as it came (bench/burst_origin.py).
CLIENT_WAITED = 0.2
PIN = "pin the server and the client to separate cores (taskset)"


@dataclass(frozen=True)
class BurstReads:
    """A level's streams judged for burst reads (successful streams sent inside the window)."""

    judged: int  # streams with MIN_CHUNKS chunks or more
    bursts: int  # of them, read in a burst
    unjudged: int  # streams with fewer chunks: not judged
    server_itl_s: float | None  # the server's ITL mean the rule used (None: absolute bounds only)
    gap_limit_s: float  # a gap under this was a buffered read
    client_waited: float | None = None  # the load generator's run-queue wait share over the window

    def __post_init__(self) -> None:
        if not 0 <= self.bursts <= self.judged or self.unjudged < 0:
            raise ValueError(f"bursts {self.bursts} must be within 0..judged {self.judged}, unjudged >= 0")
        if self.client_waited is not None and not 0.0 <= self.client_waited <= 1.0:
            raise ValueError(f"the client's wait share {self.client_waited} is not a share")

    @classmethod
    def of(cls, verdicts: np.ndarray, server_itl_s: float | None, client_waited: float | None = None) -> "BurstReads":
        """From judge()'s verdicts of a level's streams."""
        v = np.asarray(verdicts)
        return cls(
            int((v >= 0).sum()),
            int((v == 1).sum()),
            int((v < 0).sum()),
            server_itl_s,
            gap_limit(server_itl_s),
            client_waited,
        )

    @property
    def share(self) -> float:
        return self.bursts / self.judged if self.judged else 0.0

    @property
    def sent_so(self) -> bool:
        """The client did not wait for a CPU: the bursts are how the server sent the streams."""
        return self.client_waited is not None and self.client_waited < CLIENT_WAITED

    @property
    def fails(self) -> bool:
        """Whether the level's TTFT and TPOT were not measured (the client fell behind)."""
        return self.bursts >= MIN_BURSTS and self.share >= LEVEL_SHARE and not self.sent_so

    def words(self) -> str:
        """The level's verdict in a sentence (its SLO verdict's reason, analyzers.validity)."""
        if self.sent_so:
            return (
                self._head() + f", yet the load generator waited for a CPU only {self.client_waited:.0%} of its "
                "runnable time: the server sent them so (its HTTP side held tokens its engine had made), and "
                "their TTFT/TPOT are what a user of it gets"
            )
        if not self.fails:
            return self._head() + ": the client read them late (too few to fail the level)"
        return self._head() + ": the client fell behind the server and its TTFT/TPOT are not measured; " + PIN

    def note(self) -> str:
        """The level's INVALID note, worded as the sweep's own for a client that fell behind, so
        that the run's findings group both with each level's own numbers (analyzers/findings/)."""
        return f"the client fell behind ({self._head()}: its TTFT/TPOT are not measured; {PIN})"

    def _head(self) -> str:
        more = f" ({self.unjudged} more too short to judge)" if self.unjudged else ""
        return (
            f"{self.bursts} of {self.judged} {'stream' if self.judged == 1 else 'streams'}{more} arrived in one burst"
        )


def gap_limit(server_itl_s: float | None) -> float:
    return max(BUFFERED_READ_S, FAR_BELOW * server_itl_s) if server_itl_s else BUFFERED_READ_S


def judge(
    n_gaps: np.ndarray, n_fast: np.ndarray, span_s: np.ndarray, tokens: np.ndarray, server_itl_s: float | None
) -> np.ndarray:
    """Per stream: 1 read in a burst, 0 paced, -1 not judged (fewer than MIN_CHUNKS chunks).
    `n_fast`: its gaps under gap_limit(server_itl_s); `span_s`: the sum of its gaps."""
    n_gaps, n_fast = np.asarray(n_gaps, float), np.asarray(n_fast, float)
    if server_itl_s:
        decode_s = np.maximum(np.asarray(tokens, float), n_gaps + 1) - 1  # usage, never below the chunks
        decode_s = decode_s * server_itl_s
    else:
        decode_s = n_gaps * MIN_STEP_S
    burst = (n_fast > 0.5 * n_gaps) & (np.asarray(span_s, float) < SPAN_SHARE * decode_s)
    return np.where(n_gaps + 1 < MIN_CHUNKS, -1, burst.astype(int))


def judge_record(rec: RequestRecord, server_itl_s: float | None = None) -> str:
    """One stream's verdict: "burst", "paced" or "unjudged" (the rule of the module docstring)."""
    gaps = np.asarray(rec.itl_s, float)
    tokens = rec.output_tokens() or gaps.size + 1
    v = judge(
        np.array([gaps.size]),
        np.array([(gaps < gap_limit(server_itl_s)).sum()]),
        np.array([gaps.sum()]),
        np.array([tokens]),
        server_itl_s,
    )[0]
    return {1: "burst", 0: "paced", -1: "unjudged"}[int(v)]


def stream_verdicts(
    table: RequestTable, rows: np.ndarray, server_itl_s: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(the successful in-window rows among `rows`, each one's judge() verdict)."""
    df = table.df
    ok = rows[df["in_window"].to_numpy()[rows] & (df["status"].to_numpy()[rows] == "ok")]
    limit = gap_limit(server_itl_s)
    if table.itl.size:
        n_fast = np.bincount(table.itl_row, weights=table.itl < limit, minlength=len(df))[ok]
        span = np.bincount(table.itl_row, weights=table.itl, minlength=len(df))[ok]
    else:
        n_fast = span = np.zeros(ok.size)
    return ok, judge(df["n_itl"].to_numpy()[ok], n_fast, span, df["out_tokens"].to_numpy()[ok], server_itl_s)


def level_bursts(
    table: RequestTable, rows: np.ndarray, server_itl_s: float | None = None, client_waited: float | None = None
) -> BurstReads:
    """The burst verdicts of `rows`' successful streams sent inside the window."""
    return BurstReads.of(stream_verdicts(table, rows, server_itl_s)[1], server_itl_s, client_waited)


def client_wait_share(series: ProbeSeries | None, start: float | None, end: float | None) -> float | None:
    """The load generator's run-queue wait share over [start, end] (the host probe's intervals' mean),
    or None without the field or a window."""
    if series is None or start is None or end is None or len(series) == 0:
        return None
    share = series.numeric.get("client_cpu_wait_share")
    if share is None:
        return None
    inside = rows_covering(series, start, end) & np.isfinite(share)
    return float(np.mean(share[inside])) if inside.any() else None


def server_itl_mean(series: ProbeSeries | None, start: float | None, end: float | None) -> float | None:
    """The server's own ITL mean over [start, end] (its histogram's interval means, weighted by their
    counts; the server probe, docs/probes.md), or None without a server probe, a window or enough
    observations."""
    if series is None or start is None or end is None or len(series) == 0:
        return None
    count, mean = series.numeric.get("itl_count"), series.numeric.get("itl_mean_s")
    if count is None or mean is None:
        return None
    inside = rows_covering(series, start, end) & np.isfinite(count) & np.isfinite(mean) & (count > 0)
    total = float(count[inside].sum())
    if total < MIN_SERVER_ITL_COUNT:
        return None
    return float((count[inside] * mean[inside]).sum() / total)


def level_server_itl(
    series: ProbeSeries | None,
    table: RequestTable,
    rows: np.ndarray,
    start: float | None = None,
    end: float | None = None,
) -> float | None:
    """The server's ITL mean over a level's window; with no recorded window, over its in-window
    requests' span (first send to last completion)."""
    if series is None or rows.size == 0:
        return None
    if start is None or end is None:
        start, end = _requests_span(table, rows)
    return server_itl_mean(series, start, end)


def level_client_wait(series: ProbeSeries | None, table: RequestTable, rows: np.ndarray) -> float | None:
    """The load generator's run-queue wait share over a level's in-window requests' span (the window
    level_server_itl reads when none is recorded)."""
    if series is None or rows.size == 0:
        return None
    return client_wait_share(series, *_requests_span(table, rows))


def _requests_span(table: RequestTable, rows: np.ndarray) -> tuple[float | None, float | None]:
    """First send to last completion of `rows`' in-window requests; (None, None) without any."""
    df = table.df
    win = rows[df["in_window"].to_numpy()[rows]]
    sent, done = df["t_sent"].to_numpy()[win], df["t_done"].to_numpy()[win]
    if not np.isfinite(sent).any():
        return None, None
    return float(np.nanmin(sent)), float(np.nanmax(np.concatenate([sent, done])))
