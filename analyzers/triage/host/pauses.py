"""P99 check: the whole server stopped, every stream at once, then went on at its pace.

A Python server's garbage collector walking a large heap with the GIL held (docs/server.md,
"Garbage-collector pauses": one full collection of a served engine's start-up heap took ~100 ms
here), a blocking call on its event loop, the process stopped or descheduled: for a moment no
stream gets a token, whatever it was doing. The requests waiting for a first token through such a
pause make a TTFT tail that no queue, prefill or neighbour explains ("no cause found" before this
check), and the planner cannot predict it (docs/planning.md, "A pause of the whole server").

A *pause* (docs/diagnosis.md, "A pause of the whole server") is a silence in a level's merged token
stream (every token of every request of the level, from the client's timestamps) that is all of:

- long: at least PAUSE_MIN_S, PAUSE_ITL_FACTOR x the level's median inter-token gap, and
  PAUSE_TTFT_FACTOR x its median TTFT (one prefill step is never longer than the TTFTs that wait
  for it, so an ordinary prefill, however large, stays under it);
- owed: at least one stream was decoding through it (a token before it and one after it), so a
  decode step was due and none came; or, nothing decoding (an open loop between arrivals), at least
  MIN_WAITING_ALONE requests waited the whole threshold for their first token (an idle server serves
  an arrival at once);
- not a long prompt's prefill: it does not end with the first token of a prompt LONG_PROMPT_FACTOR x
  the level's median or longer (head-of-line blocking, analyzers/triage/requests.py, names those);
- not a backlog read by the client: a client that stalled while the server went on finds many
  tokens waiting in each socket and reads them back to back (analyzers/bursts.py; the client's lag,
  judged by `p99.client-lag`). A server that stopped had made at most a token or two that its HTTP
  side had not sent yet (a real refengine stopped by SIGSTOP flushes up to two per stream, 0.01-0.15
  ms apart), then it goes on at its pace.

Which requests a pause explains is the differential machinery's (analyzers/triage/exposure.py): a
request is exposed when pauses cover half of its own latency window. Where a CPU neighbour's finding
covers the same requests, the neighbour is the cause and the pauses its symptom
(`pauses_yield_to_a_neighbour`); a queue the server probe saw only around the pauses is theirs
(`queue_yields_to_pauses`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from analyzers.bursts import BUFFERED_READ_S, FAR_BELOW
from analyzers.stalls import token_arrivals
from analyzers.triage.contracts import CONTEXT_SHARE, CheckResult, Finding, failed, passed, unchecked
from analyzers.triage.exposure import differential_in_time
from analyzers.triage.host.neighbour import CPU_ID
from analyzers.triage.requests import LONG_PROMPT_FACTOR, SAME_STEP_S
from analyzers.triage.server import QUEUE_ID
from analyzers.triage.tail_windows import TailWindows, Window, overlaps
from rundir.table import RequestTable

PAUSE_ID, PAUSE_TITLE = "p99.host.pause", "the server never stops every stream at once"
PAUSE_MIN_S = 0.08  # shorter silences are a busy host's scheduling noise (tens of ms on 2 shared cores)
PAUSE_ITL_FACTOR = 10.0  # ... and ten decode steps of the level's pace at least
PAUSE_TTFT_FACTOR = 2.0  # ... and twice the level's median TTFT: longer than any one prefill step
BACKLOG_TOKENS = 3  # a stream that read this many tokens back to back after it read a backlog ...
BACKLOG_SHARE = 0.5  # ... and most streams doing so: the client stalled while the server went on
MIN_WAITING_ALONE = 2  # with no stream decoding: this many requests that waited the whole threshold
MAX_LISTED = 5  # pauses named in a finding's evidence (the longest)
QUEUE_NEAR_PAUSES = 0.8  # a queue seen this much only within one scrape of a pause is the pauses'
MAX_CANDIDATES = 200  # silences judged per level, the longest first: a level with more is not paused now and then
NEXT = (
    "find what stops the whole server process: a garbage-collector pass over a large heap (a Python "
    "server: gc.freeze() once it has started, as vLLM does; gc.callbacks times each collection), a "
    "blocking call on its event loop, or the process stopped or starved (the host's steal time, the "
    "server's run-queue wait); `py-spy record --idle` across a pause shows which"
)


@dataclass(frozen=True)
class Pause:
    level_id: str
    start: float  # epoch seconds: the last token before the silence
    end: float  # ... and the first after it
    decoding: int  # streams that owed a token through it
    waiting: int  # requests waiting for their first token when it ended

    def __post_init__(self) -> None:
        if not self.end > self.start or self.decoding < 0 or self.waiting < 0:
            raise ValueError(f"a pause needs end > start and counts of what it held: {self}")
        if self.decoding < 1 and self.waiting < MIN_WAITING_ALONE:
            raise ValueError(f"a pause holds a decoding stream or {MIN_WAITING_ALONE} waiting requests: {self}")

    @property
    def seconds(self) -> float:
        return self.end - self.start


def find_pauses(table: RequestTable) -> list[Pause]:
    """Every pause of every level, in time order."""
    df = table.df
    ok = (df["status"] == "ok").to_numpy()
    out: list[Pause] = []
    for level_id, rows in table.level_rows().items():
        out += _level_pauses(table, level_id, rows, ok)
    return sorted(out, key=lambda p: p.start)


def _level_pauses(table: RequestTable, level_id: str, rows: np.ndarray, ok: np.ndarray) -> list[Pause]:
    df = table.df
    first = df["t_first_token"].to_numpy(float)
    rows = rows[~np.isnan(first[rows])]
    ok_rows = rows[ok[rows]]
    if ok_rows.size == 0:
        return []
    mask = np.zeros(len(df), dtype=bool)
    mask[ok_rows] = True
    gaps = table.gaps_of(mask)
    if gaps.size == 0:
        return []  # one token per request: no pace to be silent against
    itl = float(np.median(gaps))
    ttft = df["ttft_s"].to_numpy(float)[ok_rows]
    threshold = max(PAUSE_MIN_S, PAUSE_ITL_FACTOR * itl, PAUSE_TTFT_FACTOR * float(np.nanmedian(ttft)))
    times, owner = token_arrivals(table, rows)
    gaps_all = np.diff(times)
    silent = np.flatnonzero(gaps_all >= threshold)
    if silent.size == 0:
        return []
    silent = silent[np.argsort(gaps_all[silent])[::-1][:MAX_CANDIDATES]]  # the longest, when a level has many
    sent = df["t_sent"].to_numpy(float)
    tokens = df["in_tokens"].to_numpy(float)
    long_prompt = tokens >= LONG_PROMPT_FACTOR * float(np.median(tokens[rows]))
    burst_gap = max(BUFFERED_READ_S, FAR_BELOW * itl)
    streams = _Streams(times, owner)
    out = []
    for i in np.sort(silent):
        a, b = float(times[i]), float(times[i + 1])
        # A stream owed a token through the silence: one of its tokens before it and one after.
        decoding = rows[(first[rows] <= a) & (streams.last[rows] >= b)]
        waiting = rows[(sent[rows] < b) & (first[rows] >= b)]
        if decoding.size == 0:
            # Nothing decoding (an open loop between arrivals): requests that arrived and waited the
            # whole threshold for a server that did nothing; it stopped no later than the first came.
            long_wait = waiting[sent[waiting] <= b - threshold]
            if long_wait.size < MIN_WAITING_ALONE:
                continue
            a = max(a, float(sent[long_wait].min()))
        ended_by = rows[(first[rows] >= b) & (first[rows] <= b + SAME_STEP_S) & (sent[rows] < a)]
        if long_prompt[ended_by].any():
            continue  # a long prompt's prefill: head-of-line blocking's
        if streams.read_a_backlog(decoding, b, burst_gap):
            continue  # the client's own stall: the server went on meanwhile (analyzers/bursts.py)
        out.append(Pause(level_id, a, b, int(decoding.size), int(waiting.size)))
    return out


class _Streams:
    """Each row's token times, looked up by row: the level's tokens sorted by (row, time)."""

    def __init__(self, times: np.ndarray, owner: np.ndarray):
        order = np.lexsort((times, owner))
        self.times, self.owner = times[order], owner[order]
        size = int(owner.max()) + 1
        self.start = np.searchsorted(self.owner, np.arange(size), side="left")
        self.end = np.searchsorted(self.owner, np.arange(size), side="right")
        self.last = np.full(size, -np.inf)
        has = self.end > self.start
        self.last[has] = self.times[self.end[has] - 1]

    def read_a_backlog(self, rows: np.ndarray, after: float, burst_gap: float) -> bool:
        """Whether most of `rows` read BACKLOG_TOKENS tokens or more back to back from `after` on: what
        a client finds in its sockets after it stalled while the server went on decoding. A server
        that stopped sends at most the token or two it had made before it stopped, then its pace."""
        backlogs = judged = 0
        for r in rows:
            mine = self.times[self.start[r] : self.end[r]]
            k = int(np.searchsorted(mine, after, side="left"))
            run = mine[k : k + BACKLOG_TOKENS]
            if run.size == BACKLOG_TOKENS:
                judged += 1
                backlogs += bool((np.diff(run) < burst_gap).all())
        return judged > 0 and backlogs >= BACKLOG_SHARE * judged


def check_pauses(table: RequestTable, tails: TailWindows) -> CheckResult:
    df = table.df
    if not df["t_first_token"].notna().any():
        return unchecked(PAUSE_ID, "host", PAUSE_TITLE, "no request received a token")
    if not table.itl.size:
        return unchecked(PAUSE_ID, "host", PAUSE_TITLE, "no inter-token gaps in the records (one token per stream)")
    pauses = find_pauses(table)
    if not pauses:
        return passed(PAUSE_ID, "host", PAUSE_TITLE, "no silence of the whole server: tokens kept reaching the streams")
    windows = [Window(p.start, p.end) for p in pauses]
    found = differential_in_time(table, tails.metric, windows)
    assert found is not None  # pauses found: the condition held
    diff = found.diff
    longest = sorted(pauses, key=lambda p: -p.seconds)[:MAX_LISTED]
    ms = sorted(round(p.seconds * 1000) for p in pauses)
    span = f"{ms[0]} ms" if ms[0] == ms[-1] else f"{ms[0]}-{ms[-1]} ms"
    levels = ", ".join(dict.fromkeys(p.level_id for p in pauses))
    decoding = max(p.decoding for p in pauses)
    waiting = max(p.waiting for p in pauses)
    said = (
        f"{len(pauses)} pause{'s' if len(pauses) > 1 else ''} of {span} in {levels}: no stream got a token "
        f"(up to {decoding} decoding and {waiting} waiting for a first token), then each went on at its pace "
        "(not a prefill, not the client)"
    )
    evidence = dict(
        diff.evidence(),
        pauses=len(pauses),
        pause_seconds=round(sum(p.seconds for p in pauses), 3),
        longest_pauses=[dict(asdict(p), seconds=round(p.seconds, 4)) for p in longest],
        pause_windows=[[p.start, p.end] for p in pauses],
    )
    if not diff.separates:
        return passed(
            PAUSE_ID,
            "host",
            PAUSE_TITLE,
            f"{said}; they do not make the tail: {diff.tail_exposed:.0%} of it lived through one vs "
            f"{diff.body_exposed:.0%} of the body",
            **evidence,
        )
    title = f"the server stopped every stream at once: {said}; " + diff.words(
        tails.metric, "the pauses", "waited through a pause"
    )
    finding = Finding(
        PAUSE_ID,
        "host",
        "high" if diff.attributable >= 0.6 else "medium",
        title,
        evidence,
        found.windows,
        len(tails.spikes),
        NEXT,
        kind="differential",
        tail_share=diff.attributable,
    )
    return failed(finding, PAUSE_TITLE, finding.title)


def pauses_yield_to_a_neighbour(findings: list[Finding]) -> None:
    """A neighbour that held the cores (`p99.host.cpu`) through the requests the pauses explain
    stopped the server: the pauses are how it showed, the neighbour is the cause. The pause finding
    becomes context there."""
    cpu = [w for f in findings if f.check_id == CPU_ID and (f.tail_share or 0.0) >= CONTEXT_SHARE for w in f.explains]
    if not cpu:
        return
    for f in findings:
        if f.check_id == PAUSE_ID and f.explains:
            starts = np.array([w.start for w in f.explains])
            ends = np.array([w.end for w in f.explains])
            if overlaps(starts, ends, cpu).mean() >= 0.5:
                f.tail_share = min(f.tail_share or 0.0, CONTEXT_SHARE / 2)


def queue_yields_to_pauses(findings: list[Finding], scrape_interval_s: float) -> None:
    """Requests that arrive while the server is stopped wait in its queue, and the server probe's
    next scrape reads them: a queue (`p99.sched.queueing`, judged on probe intervals) seen in the
    spike windows only within one scrape interval of a pause is the pauses' consequence, as the
    queue behind a neighbour is the neighbour's (analyzers/triage/tail_shares.py). A real server
    stopped four times for 0.4 s in a c6 level read 1.0 waiting in the spikes against 0.0 in the
    calm, and the queue had outranked the pauses (tests/analyzers/triage/test_real_causes.py)."""
    pauses = [f for f in findings if f.check_id == PAUSE_ID and (f.tail_share or 0.0) >= CONTEXT_SHARE]
    if not pauses:
        return
    near = [
        Window(a - scrape_interval_s, b + scrape_interval_s) for f in pauses for a, b in f.evidence["pause_windows"]
    ]
    for f in findings:
        if f.check_id == QUEUE_ID and f.explains:
            starts = np.array([w.start for w in f.explains])
            ends = np.array([w.end for w in f.explains])
            if overlaps(starts, ends, near).mean() >= QUEUE_NEAR_PAUSES:
                f.tail_share = 0.0
                f.evidence["queue_was_the_pauses"] = True
