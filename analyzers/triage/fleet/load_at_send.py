"""What each replica of a fleet held when a request was sent: the reconstruction the fleet checks share.

The records say, per request, when it was sent, when its first token came, when it ended and which
replica served it (RequestRecord.replica). Laid over each other they give every replica's in-flight
requests at any instant, and the work those still had to do: a request's prompt until its first
token, then its output tokens, taken as streamed at an even pace from the first token to the last
(the client's own clock; a request the run cut off is held until the last end the run saw). Read at
each request's own send time, that is the load its replica carried when the router chose it, and
the load every other replica carried at that instant: what a least-outstanding or token-aware router
would have compared.

Each replica's count and its outstanding tokens are sums of simple pieces over time (a step up at
the send, the prompt's step down at the first token, a straight line down to the end), so both are
read at every send time with sorted event times and cumulative sums: O(n log n), not O(n^2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rundir.table import RequestTable

MIN_REPLICAS = 2  # one replica named is a single server, not a fleet


def replica_order(name: str) -> tuple[int, int | str]:
    """The fleet's indices in numeric order, then other names (URLs) as they sort."""
    return (0, int(name)) if name.isdigit() else (1, name)


def replica_label(name: str, urls: list[str]) -> str:
    """'replica 1', with its URL where the client drove the URLs (a record's replica is then its URL's
    index in run.json's target.urls)."""
    url = urls[int(name)] if name.isdigit() and int(name) < len(urls) else None
    return f"replica {name}" + (f" ({url})" if url else "")


def replica_names(table: RequestTable) -> np.ndarray:
    """Each row's replica as a string, None where the record names none (NaN from the reader)."""
    raw = table.df["replica"].to_numpy(object)
    return np.array([str(n) if isinstance(n, str) and n else None for n in raw], dtype=object)


@dataclass
class FleetLoad:
    replicas: list[str]  # the replicas named, in replica_order
    replica: np.ndarray  # per row: index into `replicas`, -1 where none is named
    in_flight: np.ndarray  # (rows, replicas): requests in flight on each when the row was sent (not itself)
    outstanding: np.ndarray  # (rows, replicas): the tokens those requests still had to go
    # (replicas,): the most requests each was seen generating at once (between first token and end):
    # its batch room as the run showed it. A request sent while its replica held that many waited for
    # one of them to end (a max_num_seqs or a KV cache full); a replica never full shows its peak load.
    slots: np.ndarray

    def __post_init__(self) -> None:
        n, r = self.replica.size, len(self.replicas)
        if r < MIN_REPLICAS:
            raise ValueError(f"a fleet has at least {MIN_REPLICAS} replicas, got {self.replicas}")
        if self.in_flight.shape != (n, r) or self.outstanding.shape != (n, r):
            raise ValueError(f"loads must be ({n}, {r}), got {self.in_flight.shape} and {self.outstanding.shape}")
        if self.slots.shape != (r,) or (self.slots < 0).any():
            raise ValueError(f"slots must be ({r},) counts, got {self.slots}")
        if (self.in_flight < 0).any() or (self.outstanding < -1e-6).any():
            raise ValueError("a replica's load cannot be negative")
        if ((self.replica < -1) | (self.replica >= r)).any():
            raise ValueError("a row's replica index is out of range")

    @property
    def named(self) -> np.ndarray:
        return self.replica >= 0

    def own(self, load: np.ndarray) -> np.ndarray:
        """Per row, `load` on its own replica (NaN where it names none)."""
        out = np.full(self.replica.size, np.nan)
        rows = np.flatnonzero(self.named)
        out[rows] = load[rows, self.replica[rows]]
        return out

    def lightest_other(self, load: np.ndarray) -> np.ndarray:
        """Per row, the least `load` any other replica held at its send time (NaN where it names none)."""
        masked = load.astype(float).copy()
        rows = np.flatnonzero(self.named)
        masked[rows, self.replica[rows]] = np.inf
        out = masked.min(axis=1)
        out[~self.named] = np.nan
        return out

    def waited_for_a_slot(self) -> np.ndarray:
        """Per row: sent to a replica already holding as many requests as it was ever seen generating
        at once, while another replica held fewer than its own: it waited where it need not have."""
        own = self.own(self.in_flight)
        own_slots = np.where(self.named, self.slots[np.maximum(self.replica, 0)], np.inf)
        room = self.in_flight < self.slots[None, :]
        rows = np.flatnonzero(self.named)
        room[rows, self.replica[rows]] = False
        return self.named & (own >= own_slots) & (own_slots > 0) & room.any(axis=1)


def fleet_load(table: RequestTable) -> FleetLoad | None:
    """The fleet's load at every request's send time; None when fewer than two replicas are named."""
    names = replica_names(table)
    replicas = sorted({n for n in names if n is not None}, key=replica_order)
    if len(replicas) < MIN_REPLICAS:
        return None
    df = table.df
    index = {name: i for i, name in enumerate(replicas)}
    replica = np.array([index[n] if n is not None else -1 for n in names], dtype=int)
    sent = df["t_sent"].to_numpy(float)
    first = df["t_first_token"].to_numpy(float)
    done = df["t_done"].to_numpy(float)
    last = float(np.nanmax(done)) if np.isfinite(done).any() else float(np.nanmax(sent))
    done = np.where(np.isfinite(done), done, last)  # cut off: still running when the run ended
    # Times from the run's first send: a + b * t summed over thousands of requests stays exact.
    t0 = float(np.nanmin(sent))
    sent, first, done = sent - t0, first - t0, done - t0
    prompt = df["in_tokens"].to_numpy(float)
    output = df["out_tokens"].to_numpy(float)
    n = len(df)
    in_flight = np.zeros((n, len(replicas)))
    outstanding = np.zeros((n, len(replicas)))
    slots = np.zeros(len(replicas))
    for r in range(len(replicas)):
        mine = (replica == r) & np.isfinite(sent)
        in_flight[:, r] = _count_at(sent, sent[mine], done[mine])
        outstanding[:, r] = _work_at(sent, sent[mine], first[mine], done[mine], prompt[mine], output[mine])
        generating = mine & np.isfinite(first) & (first < done)
        slots[r] = _most_at_once(first[generating], done[generating])
    return FleetLoad(replicas, replica, in_flight, np.clip(outstanding, 0.0, None), slots)


def _most_at_once(starts: np.ndarray, ends: np.ndarray) -> float:
    """The most intervals [start, end) open at one instant (an end before a start at the same time)."""
    if not starts.size:
        return 0.0
    times = np.concatenate([starts, ends])
    steps = np.concatenate([np.ones(starts.size), -np.ones(ends.size)])
    order = np.lexsort((steps, times))  # at equal times the -1 (an end) first
    return float(np.cumsum(steps[order]).max())


def _count_at(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Requests with start < t < end at each time in `t` (a request sent at that very instant, the
    one being placed among them, is not its own load)."""
    started = np.searchsorted(np.sort(starts), t, side="left")
    ended = np.searchsorted(np.sort(ends), t, side="right")
    return np.clip(started - ended, 0, None).astype(float)


def _work_at(
    t: np.ndarray, starts: np.ndarray, first: np.ndarray, ends: np.ndarray, prompt: np.ndarray, output: np.ndarray
) -> np.ndarray:
    """The sum over requests of their outstanding tokens at each time in `t`: prompt + output from the
    send to the first token, then the output falling in a straight line to 0 at the end. Each piece is
    a + b * t between events, so the sum is A(t) + B(t) * t with A and B cumulative sums of jumps."""
    has_first = np.isfinite(first) & (first < ends)
    f = np.where(has_first, np.maximum(first, starts), ends)
    span = np.where(has_first, ends - f, 1.0)
    slope = np.where(has_first & (span > 0), output / np.where(span > 0, span, 1.0), 0.0)
    times = np.concatenate([starts, f, ends])
    # Before the first token: a = prompt + output. From it: a = output + slope * f, b = -slope. At the end: 0.
    da = np.concatenate([prompt + output, (output + slope * f) - (prompt + output), -(output + slope * f)])
    db = np.concatenate([np.zeros_like(slope), -slope, slope])
    order = np.argsort(times, kind="stable")
    times, a, b = times[order], np.cumsum(da[order]), np.cumsum(db[order])
    k = np.searchsorted(times, t, side="left")  # events strictly before t
    out = np.zeros(t.shape)
    valid = (k > 0) & np.isfinite(t)
    out[valid] = a[k[valid] - 1] + b[k[valid] - 1] * t[valid]
    return out
