"""The options that name and reach the target, declared once for every command that sweeps one
(`llmbench sweep`, `llmbench capacity`): the same flag means the same thing, with the same help."""

from __future__ import annotations

import typer

from loadgen.replica_balancer import CLIENT_LB_POLICIES
from refengine.server.dp_policy import LB_POLICIES as FRONT_LB_POLICIES
from refengine.server.dp_policy import REPLICA_HEADER as FRONT_REPLICA_HEADER

TARGET = typer.Option(
    None,
    help="Base URL of an OpenAI-compatible server; default: start the bundled engine on a "
    "free loopback port. Several, comma-separated (URL1,URL2): replicas driven directly, the "
    "client balancing over them (--lb-policy); each request's record names its replica by its "
    "index in this list (0, 1, ...).",
)
MODEL = typer.Option(
    None,
    help="Model name to send (--target; default: the one model its /v1/models lists) or to "
    "serve (embedded, default tiny).",
)
API_KEY = typer.Option(None, envvar="OPENAI_API_KEY", help="Bearer token for --target.")
ENDPOINT = typer.Option("completions", help="completions (/v1/completions) or chat (/v1/chat/completions).")
IGNORE_EOS = typer.Option(
    True,
    help="Send ignore_eos so outputs have the requested length (a server that refuses "
    "it is detected by the preflight and the field dropped).",
)
DATA_PARALLEL_SIZE = typer.Option(
    1,
    min=1,
    help="Embedded engine only: serve N replicas behind one front "
    "(`llmbench serve --data-parallel-size N`); recorded as run.json's "
    "target.replicas. An external fleet is one --target URL: its router balances.",
)
REPLICA_HEADER = typer.Option(
    FRONT_REPLICA_HEADER,
    help="Response header naming the replica that served each "
    "request, recorded in its record's `replica` (default: the header the bundled "
    "fleet's front sets; use your router's, e.g. one that names the upstream; '' to "
    "read none).",
)

LB_POLICY = typer.Option(
    None,
    help="How requests are balanced over a fleet we drive: round-robin (default) or "
    "least-outstanding (the replica with the fewest requests in flight). With --target URL1,URL2 "
    "the client balances (each load-generator process over its own requests); with "
    "--data-parallel-size N the bundled fleet's front does. Recorded as run.json's "
    "target.lb_policy.",
)
REPLICA_METRICS = typer.Option(
    None,
    help="Each replica's own /metrics page, comma-separated in replica order (a "
    "URL ending in /metrics, or a base URL to which /metrics is added), for a fleet behind "
    "a router that does not aggregate metrics: the server probe reads each and records "
    "per_engine (key i: the i-th page) besides the fleet's sums. Default with --target "
    "URL1,URL2: each target's own page.",
)


def target_urls(text: str | None) -> list[str]:
    """--target's URLs in order (none: the embedded engine); a user error names the one at fault."""
    if text is None:
        return []
    urls = [u.strip().rstrip("/") for u in text.split(",")]
    for u in urls:
        if not u.startswith(("http://", "https://")):
            raise typer.BadParameter(f"must be a URL like http://127.0.0.1:8000, got {u!r}", param_hint="--target")
    if len(set(urls)) != len(urls):
        raise typer.BadParameter(f"a URL is listed twice in {text!r}", param_hint="--target")
    return urls


def lb_policy(text: str | None, fleet: str | None) -> str | None:
    """run.json's target.lb_policy: --lb-policy (default round-robin) where we balance a fleet: `fleet`
    is "direct" (the client, over --target's URLs), "embedded" (the bundled fleet's front) or None
    (nothing of ours balances, where --lb-policy is a user error)."""
    if fleet is None:
        if text is not None:
            raise typer.BadParameter(
                "only for a fleet we drive: several --target URLs, or --data-parallel-size N "
                "(the router behind one --target URL balances by its own policy)",
                param_hint="--lb-policy",
            )
        return None
    # The client's policies and the front's are the same names (tests/loadgen/test_replica_balancer.py).
    names = CLIENT_LB_POLICIES if fleet == "direct" else FRONT_LB_POLICIES
    policy = (text or names[0]).strip()
    if policy not in names:
        raise typer.BadParameter(f"must be one of {', '.join(names)}, got {text!r}", param_hint="--lb-policy")
    return policy


def metrics_page(url: str) -> str:
    """A replica's /metrics page from its URL: as given when it ends in /metrics, else the server's
    base URL (without a trailing /v1, as requests are sent) and /metrics."""
    url = url.strip().rstrip("/")
    if url.endswith("/metrics"):
        return url
    return (url[: -len("/v1")] if url.endswith("/v1") else url) + "/metrics"


def replica_metrics(text: str | None, target: list[str], replicas: int) -> list[str]:
    """run.json's target.replica_metrics: --replica-metrics' pages, else each directly driven
    target's own; one per replica. A user error names what does not fit."""
    if text is None:
        return [metrics_page(u) for u in target] if len(target) > 1 else []
    if not target:
        raise typer.BadParameter(
            "only for a fleet given by --target: the bundled fleet's front already labels "
            "each replica's series (--data-parallel-size)",
            param_hint="--replica-metrics",
        )
    pages = [metrics_page(u) for u in text.split(",")]
    for page in pages:
        if not page.startswith(("http://", "https://")):
            raise typer.BadParameter(
                f"must be URLs like http://10.0.0.5:8000/metrics, got {page!r}", param_hint="--replica-metrics"
            )
    if len(set(pages)) != len(pages):
        raise typer.BadParameter(f"a page is listed twice in {text!r}", param_hint="--replica-metrics")
    if len(pages) != replicas:
        raise typer.BadParameter(
            f"one page per replica: {len(pages)} pages for {replicas} replicas (the --target URLs, or --replicas)",
            param_hint="--replica-metrics",
        )
    return pages
