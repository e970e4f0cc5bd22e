"""Interrupt expiry, by the timer and on the next admission: one expired interrupt expires the execution."""
from tests.run_harness import (THREAD, allow, body, interrupt_ids, interrupted_permission, make_manager, permission,
                               run_events, status, task_frame)
from tests.run_harness import client  # noqa: F401  (pytest fixtures)


def test_timer_expiry_of_one_of_two_interrupts_is_reported_as_expired(tmp_path, client):
    now = [1_800_000_000.0]
    manager = make_manager(tmp_path, client, clock=lambda: now[0], interrupt_ttl=100.0)
    try:
        interrupted_permission(manager, client, "perm-1")              # perm-1 expires at t0 + 100
        now[0] += 50
        both = [permission("perm-1", "tool-perm-1"), permission("perm-2", "tool-perm-2")]
        client.tasks.append(task_frame("input-required", iac={"input": both}))
        discovery = run_events(manager, body(manager, None, run="run-2", resume=allow("perm-1")))
        assert interrupt_ids(discovery) == ["perm-1", "perm-2"]         # perm-2 expires at t0 + 150
        expiries = [i["expiresAt"] for i in discovery[-1]["outcome"]["interrupts"]]
        assert expiries[0] != expiries[1]
        now[0] += 70                                                    # t0 + 120: the timer's turn
        assert manager.expiry.expire(THREAD)
        sent_before = len(client.sent())
        client.streams.append([status("working"), status("input-required", iac={"input": both[1]})])
        client.streams.append([status("working", "Both written."), status("input-required")])
        answered = run_events(manager, body(manager, None, run="run-3", resume=allow("perm-1", "perm-2")))
    finally:
        manager.stop()
    # One expired interrupt expires the execution: the late resume is EXECUTION_EXPIRED and sends nothing
    # (the task was cancelled, so a GetTask must not "rediscover" the expired input).
    late = [m["parts"][0]["data"]["inputId"] for m in client.sent()[sent_before:]]
    assert late == [], "answers delivered after perm-1 expired: %r" % late
    assert answered[-1]["type"] == "RUN_ERROR" and answered[-1]["code"] == "EXECUTION_EXPIRED", answered[-1]
