"""Multi-turn sessions: each turn resends its conversation's history as chat messages, so every
later turn's prompt starts with the earlier turn's."""

from __future__ import annotations

from loadgen import LevelSpec, TargetSpec, run_level
from loadgen.openai_body import request_dict
from loadgen.workloads import level_workload_factory, make_workload


def test_turns_extend_their_history():
    w = make_workload({"kind": "sessions", "input_len": 20, "output_len": 10, "turns": 3, "num_sessions": 2})
    first, second, third = w.spec(0), w.spec(2), w.spec(4)  # conversation 0, turns 0, 1, 2
    assert [s.extra_meta for s in (first, second, third)] == [{"session": 0, "turn": t} for t in range(3)]
    assert second.prompt.startswith(first.prompt) and third.prompt.startswith(second.prompt)
    assert [m["role"] for m in third.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert third.target_input_len == 3 * 20 + 2 * 10
    assert w.spec(6).extra_meta == {"session": 2, "turn": 0}  # a new conversation after the last turn
    body = request_dict(third, TargetSpec("http://127.0.0.1:1", "m", endpoint="chat"))
    assert body["messages"] == third.messages


def test_sessions_on_the_chat_endpoint(slot_server):
    server = slot_server(slots=8, prefill_ms=5, itl_ms=5)
    level = LevelSpec(
        level_id="c2", concurrency=2, input_len=12, output_len=4, warmup_s=0.0, duration_s=1.5, request_timeout_s=10.0
    )
    records = []
    factory = level_workload_factory(kind="sessions", turns=3, num_sessions=4)
    result = run_level(level, TargetSpec(server.url, "slot-model", endpoint="chat"), factory, records.extend)
    # (requests still running when the level stops after its drain are recorded as cancelled)
    assert result.end_reason == "complete" and all(r.status == "ok" for r in records if r.in_window)
    prompts = server.seen()["prompts"]
    assert len(prompts) >= 6
    # Each of the first conversations' turns extends an earlier prompt the server already saw.
    later = [p for p in prompts[4:8]]
    assert all(any(p.replace("\n", "").startswith(q.replace("\n", "")) for q in prompts[:4]) for p in later)
