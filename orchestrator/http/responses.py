"""The HTTP API's JSON responses, written by one encoder
(:func:`orchestrator.operations.encoding.encode`)."""

from __future__ import annotations

from starlette.responses import Response

from goondan.errors import DeliveryCode
from ipc.delegation import DelegateAnswer
from orchestrator.operations.answers import Answer, ErrorBody, ErrorDetail
from orchestrator.operations.encoding import encode


class AnswerResponse(Response):
    """A typed answer (or a Turn's :class:`~ipc.delegation.DelegateAnswer`, in its wire
    form) as its JSON body."""

    media_type = "application/json"

    def __init__(self, answer: Answer | DelegateAnswer, status_code: int = 200) -> None:
        wire = answer.to_wire() if isinstance(answer, DelegateAnswer) else answer
        super().__init__(encode(wire), status_code=status_code)


def error(status: int, code: str, message: str) -> AnswerResponse:
    """The JSON error body every failure of the API answers with."""
    return AnswerResponse(ErrorBody(error=ErrorDetail(code=code, message=message)), status)


FAILURE_STATUS: dict[str, int] = {DeliveryCode.INSTANCE_BUSY: 409}
"""The HTTP status of a failed Turn's answer by its code, where it is not 502: a conversation
busy under ``policy.concurrency: reject`` is the caller's conflict, not a bad gateway."""


def answer_status(answer: DelegateAnswer) -> int:
    """The HTTP status of a Turn's answer: 200, or its failure's (502 unless
    :data:`FAILURE_STATUS` names another)."""
    if answer.ok:
        return 200
    code = answer.error.code if answer.error is not None else None
    return FAILURE_STATUS.get(code or "", 502)
