"""Accepted external requests: recorded durably before they are accepted, run once per
idempotency key, answered by id (:mod:`.store`, :mod:`.desk`, :mod:`.feed`)."""

from orchestrator.requests.desk import Admission, Intake, RequestDesk, SharedRequests
from orchestrator.requests.feed import RequestFeed
from orchestrator.requests.store import KeyReused, RequestRecord, RequestStore, StoreFull

__all__ = [
    "Admission",
    "Intake",
    "KeyReused",
    "RequestDesk",
    "RequestFeed",
    "RequestRecord",
    "RequestStore",
    "SharedRequests",
    "StoreFull",
]
