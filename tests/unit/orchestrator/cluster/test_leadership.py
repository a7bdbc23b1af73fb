"""The signature of leadership records: only the members' key makes one that checks."""

from __future__ import annotations

import pytest

from orchestrator.cluster.leadership import LeaderSeal, rank
from orchestrator.cluster.settings import ClusterAuthRefused, ClusterSettings

KEY = b"0123456789abcdef0123456789abcdef"
RECORD = {"incarnation": "abc", "fingerprint": "f" * 64, "term": 7, "beat": 3}


def test_a_signed_record_checks_and_any_change_to_it_does_not() -> None:
    seal = LeaderSeal(KEY, "goondan_relay")
    signed = seal.sign(dict(RECORD))
    assert seal.check(signed)
    changes = [("incarnation", "evil"), ("term", 8), ("beat", 4), ("epoch", 1), ("leaving", True)]
    for field, value in changes:
        assert not seal.check({**signed, field: value})
    assert not seal.check(RECORD)  # unsigned
    assert not seal.check({**signed, "sig": 12})
    assert not LeaderSeal(b"another key of 32 characters....", "goondan_relay").check(signed)
    assert not LeaderSeal(KEY, "goondan_other").check(signed)  # not another cluster's either


def test_without_a_key_records_are_neither_signed_nor_checked() -> None:
    seal = LeaderSeal(None, "goondan_relay")
    assert seal.sign(dict(RECORD)) == RECORD
    assert seal.check(RECORD)


def test_a_greater_term_outranks_any_beat_and_a_later_bucket_any_term() -> None:
    assert rank({"term": 8, "beat": 1}) > rank({"term": 7, "beat": 900})
    assert rank({"term": 7, "beat": 4}) > rank({"term": 7, "beat": 3})
    assert rank({"epoch": 2, "term": 1, "beat": 1}) > rank({"epoch": 1, "term": 900, "beat": 9})
    assert rank({"term": "9", "beat": True}) == (0, 0, 0)  # not numbers: the oldest


def test_the_key_is_required_unless_insecure_and_never_shown() -> None:
    with pytest.raises(ClusterAuthRefused, match="GOONDAN_CLUSTER_KEY is not set"):
        ClusterSettings("nats://h:4222", "s").check_leader_key()
    with pytest.raises(ClusterAuthRefused, match="too short"):
        ClusterSettings("nats://h:4222", "s", leader_key=b"short").check_leader_key()
    ClusterSettings("nats://h:4222", "s", insecure=True).check_leader_key()
    assert KEY.decode() not in repr(ClusterSettings("nats://h:4222", "s", leader_key=KEY))
