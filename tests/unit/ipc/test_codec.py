"""Frames: round trips, named rejections, resynchronisation after garbage, never a raise."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipc import (
    MAX_FRAME_BYTES,
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    FrameDecoder,
    FrameTooLarge,
    IpcError,
    IpcProtocolError,
    ShutdownMessage,
    encode,
)
from ipc.codec import HEADER, MAGIC, Unencodable
from ipc.messages import CircularCall

MESSAGES = [
    DelegateMessage(
        sender="a", to="b", correlation_id="c1", payload={"input": "hi", "callChain": ["a"]}
    ),
    DelegateResultMessage(
        sender="b", to="a", correlation_id="c1", payload={"status": "ok", "output": "yo"}
    ),
    EventMessage(sender="a", to="orchestrator", payload={"kind": "ready", "pid": 12}),
    ShutdownMessage(
        sender="orchestrator", to="a", payload={"gracePeriodMs": 1000, "reason": "restart"}
    ),
]


def decode_all(data: bytes) -> list[object]:
    decoder = FrameDecoder()
    out = decoder.feed(data)
    tail = decoder.eof()
    return [*out, *([tail] if tail else [])]


def test_every_type_round_trips() -> None:
    assert decode_all(b"".join(encode(m) for m in MESSAGES)) == MESSAGES


def test_wire_uses_the_spec_field_names() -> None:
    body = encode(MESSAGES[0])[HEADER.size :]
    assert msgspec.msgpack.decode(body) == {
        "type": "delegate",
        "from": "a",
        "to": "b",
        "payload": {"input": "hi", "callChain": ["a"]},
        "correlationId": "c1",
    }


def test_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    out: list[object] = []
    for byte in b"".join(encode(m) for m in MESSAGES):
        out.extend(decoder.feed(bytes([byte])))
    assert out == MESSAGES
    assert decoder.eof() is None


def test_garbage_is_dropped_and_later_frames_survive() -> None:
    out = decode_all(
        b"garbage!" + encode(MESSAGES[0]) + b"\x01\x02\x03\x04\x05\x06\x07" + encode(MESSAGES[1])
    )
    messages = [m for m in out if not isinstance(m, IpcProtocolError)]
    errors = [e for e in out if isinstance(e, IpcProtocolError)]
    assert messages == MESSAGES[:2]
    assert {e.reason for e in errors} == {"bad_magic"}


def test_an_oversize_length_resynchronises_instead_of_skipping() -> None:
    bogus = HEADER.pack(MAGIC, MAX_FRAME_BYTES + 1) + b"xx"
    out = decode_all(bogus + encode(MESSAGES[2]))
    assert out[0] == IpcProtocolError("frame_too_large", out[0].raw_prefix, out[0].detail)  # type: ignore[union-attr]
    assert out[-1] == MESSAGES[2]


def test_truncated_at_end_of_stream() -> None:
    frame = encode(MESSAGES[0])
    out = decode_all(frame[:-3])
    assert len(out) == 1
    assert isinstance(out[0], IpcProtocolError)
    assert out[0].reason == "truncated"


def test_undecodable_and_wrong_shape_bodies_are_named() -> None:
    not_msgpack = b"\xc1\xc1\xc1"
    wrong_shape = msgspec.msgpack.encode({"type": "delegate", "from": "a"})
    out = decode_all(
        HEADER.pack(MAGIC, len(not_msgpack))
        + not_msgpack
        + HEADER.pack(MAGIC, len(wrong_shape))
        + wrong_shape
    )
    assert [e.reason for e in out if isinstance(e, IpcProtocolError)] == [
        "undecodable",
        "invalid_message",
    ]


def test_the_sender_refuses_an_oversize_message() -> None:
    huge = EventMessage(
        sender="a", to="b", payload={"kind": "x", "blob": "x" * (MAX_FRAME_BYTES + 1)}
    )
    try:
        encode(huge)
    except FrameTooLarge:
        return
    raise AssertionError("encode accepted an oversize message")


@pytest.mark.parametrize(
    "payload",
    [{"input": "\ud800x"}, {"timeoutMs": 10**20}],
    ids=["lone surrogate", "int past 64 bits"],
)
def test_a_message_msgpack_cannot_carry_is_refused_as_unencodable(
    payload: dict[str, object],
) -> None:
    message = DelegateMessage(sender="a", to="b", correlation_id="c1", payload=payload)
    with pytest.raises(Unencodable) as refused:
        encode(message)
    assert refused.value.code == "IPC_MALFORMED_PAYLOAD"


def test_errors_cross_the_pipe_and_unknown_codes_keep_the_base() -> None:
    assert isinstance(IpcError.from_dict(CircularCall("a -> b -> a").to_dict()), CircularCall)
    unknown = IpcError.from_dict({"code": "E_SOMETHING_NEW", "message": "m"})
    assert (type(unknown), unknown.code) == (IpcError, "E_SOMETHING_NEW")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=20))
def test_random_streams_never_raise(chunks: list[bytes]) -> None:
    decoder = FrameDecoder()
    for chunk in chunks:
        decoder.feed(chunk)
    decoder.eof()


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.dictionaries(st.text(max_size=8), JSON, max_size=4), min_size=1, max_size=5),
    st.lists(st.binary(max_size=16), max_size=5),
    st.randoms(use_true_random=False),
)
def test_valid_messages_survive_random_splits_and_garbage(
    payloads: list[dict[str, object]], garbage: list[bytes], rnd: object
) -> None:
    import random

    assert isinstance(rnd, random.Random)
    messages = [EventMessage(sender="a", to="b", payload=p) for p in payloads]
    stream = b""
    for index, message in enumerate(messages):
        junk = garbage[index] if index < len(garbage) else b""
        stream += junk.replace(MAGIC[:1], b"") + encode(message)
    decoder = FrameDecoder()
    out: list[object] = []
    position = 0
    while position < len(stream):
        step = rnd.randint(1, 50)
        out.extend(decoder.feed(stream[position : position + step]))
        position += step
    assert [m for m in out if not isinstance(m, IpcProtocolError)] == messages


@pytest.mark.parametrize("payload", [[1, "two"], "text", 3, 2.5, True, None, {"a": [1]}])
def test_a_payload_may_be_any_json_value(payload: object) -> None:
    """``payload`` is any JSON value on the wire."""
    from ipc import EventMessage, parse_message

    message = EventMessage(sender="a", to="b", payload=payload)
    decoded = parse_message(message.to_wire())
    assert decoded.payload == payload
    assert isinstance(decoded, EventMessage)
    assert decoded.kind == ""
