"""The call cycles the Router refuses, read from its pending-request rows alone."""

from __future__ import annotations

from orchestrator.pending import Pending, chain_cycle, wait_cycle, wait_path


def blocked(waiter: str | None, awaited: str, correlation_id: str = "c") -> Pending:
    """A pending request whose answer ``waiter``'s Turn waits for (``None``: nobody's)."""
    return Pending(correlation_id, "caller", "target", waiter=waiter, awaited=awaited)


def test_a_conversation_waits_transitively_along_the_pending_rows() -> None:
    rows = [blocked("a@k", "b@k", "1"), blocked("b@k", "c@k", "2"), blocked("x@k", "y@k", "3")]
    assert wait_path(rows, "a@k", "c@k") == ["a@k", "b@k", "c@k"]
    assert wait_path(rows, "c@k", "a@k") is None  # the edges have a direction
    assert wait_path(rows, "a@k", "y@k") is None


def test_a_request_nobody_waits_on_adds_no_edge() -> None:
    # a background request (or one from outside) blocks no Turn: it cannot close a cycle
    rows = [blocked(None, "b@k", "1"), blocked("b@k", "a@k", "2")]
    assert wait_cycle("a@k", "b@k", rows) is None
    assert wait_path(rows, "a@k", "b@k") is None


def test_a_request_that_would_deadlock_two_queues_names_the_cycle() -> None:
    # b@k waits for a@k already: a@k blocking on b@k would wait forever
    refusal = wait_cycle("b@k", "a@k", [blocked("b@k", "a@k")])
    assert refusal is not None
    assert refusal.code == "CIRCULAR_CALL_DETECTED"
    assert refusal.details == {"chain": ["a@k", "b@k", "a@k"]}
    assert refusal.message == "Circular call detected across requests: a@k -> b@k -> a@k"


def test_a_call_chain_that_holds_its_target_names_the_cycle() -> None:
    refusal = chain_cycle(("a@k", "b@k"), "a@k")
    assert refusal.code == "CIRCULAR_CALL_DETECTED"
    assert refusal.details == {"chain": ["a@k", "b@k", "a@k"]}
    assert refusal.message == "Circular call detected: a@k -> b@k -> a@k"
