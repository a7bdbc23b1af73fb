"""The API's one JSON encoder: what it writes beside what Python's ``json`` wrote."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.operations.answers import ErrorBody, ErrorDetail
from orchestrator.operations.encoding import decode, encode


def json_wrote(data: object) -> bytes:
    """What the API wrote before, with Python's ``json``."""
    return json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def spelled_alike(value: float) -> bool:
    """A float both encoders spell the same way: finite, and 1e-4 to 1e16 in magnitude."""
    return math.isfinite(value) and (value == 0 or 1e-4 <= abs(value) < 1e16)


texts = st.text(alphabet=st.characters(exclude_categories=["Cs"]))  # UTF-8 can hold them
wire_data = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False).filter(spelled_alike)
    | texts,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(texts, inner, max_size=5),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(wire_data)
def test_a_body_is_what_json_wrote_but_for_far_floats(data: object) -> None:
    # Control characters, quotes, backslashes, non-ASCII text and key order included.
    assert encode(data) == json_wrote(data)


def test_a_far_float_keeps_its_value_in_another_spelling() -> None:
    values = [2e-06, 9.99e-05, 1e16, 1e20, -4.1056171877280306e-05, 1.5e300]
    body = encode(values)
    assert body == b"[2e-6,0.0000999,1e16,1e20,-0.000041056171877280306,1.5e300]"
    assert json.loads(body) == values


def test_a_float_json_cannot_spell_is_null_and_the_body_is_still_written() -> None:
    assert json.loads(encode({"a": math.nan, "b": -math.inf, "c": 1.0})) == {
        "a": None,
        "b": None,
        "c": 1.0,
    }


def test_an_answer_is_written_from_its_struct_and_read_back_into_it() -> None:
    answer = ErrorBody(error=ErrorDetail(code="BAD_REQUEST", message='"input" — 입력이 없습니다\n'))
    body = encode(answer)
    assert body == json_wrote(json.loads(body))  # camelCase keys, no spaces, UTF-8 as it is
    assert decode(body, ErrorBody) == answer
