"""The HTTP API's JSON responses, written by one encoder
(:func:`orchestrator.operations.encoding.encode`)."""

from __future__ import annotations

from starlette.responses import Response

from ipc.delegation import DelegateAnswer
from orchestrator.operations.answers import Answer, ErrorBody, ErrorDetail
from orchestrator.operations.encoding import encode, encode_wire


class AnswerResponse(Response):
    """A typed answer (or a Turn's :class:`~ipc.delegation.DelegateAnswer`, in its wire
    form) as its JSON body."""

    media_type = "application/json"

    def __init__(self, answer: Answer | DelegateAnswer, status_code: int = 200) -> None:
        body = (
            encode_wire(answer.to_wire()) if isinstance(answer, DelegateAnswer) else encode(answer)
        )
        super().__init__(body, status_code=status_code)


def error(status: int, code: str, message: str) -> AnswerResponse:
    """The JSON error body every failure of the API answers with."""
    return AnswerResponse(ErrorBody(error=ErrorDetail(code=code, message=message)), status)
