"""Frames written by the hand-written codec this protocol had before its payloads became msgspec
structs, and frames written now, read across versions: a mixed-version pair of processes (an
agent started before an upgrade, a cluster node not yet upgraded) still understands each other.

``OLD_FRAMES`` holds, for each message of ``SAMPLES``, the frame the earlier encoder wrote and the
payload keys the earlier reader read the same when absent (fields at their default): the structs
leave off the wire exactly such fields and no others.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from ipc import (
    DelegateMessage,
    DelegateResultMessage,
    EventMessage,
    IpcMessage,
    ShutdownMessage,
    build,
)
from ipc import messages as m
from ipc import protocol as wire
from ipc.codec import HEADER_SIZE, FrameDecoder, encode
from ipc.delegation import DelegateAnswer, Handoff, ShutdownRequest
from ipc.events import (
    BootFailed,
    Cancel,
    ConnectorEventReport,
    ConnectorEventSettled,
    ModelUsage,
    Ready,
    RestartRequest,
    RuntimeEventReport,
    Send,
    SendDone,
    SendFailed,
    SendRefused,
    SendStarted,
    ShutdownAck,
    StatusChanged,
    TextDelta,
    TurnCompleted,
    read_event,
)
from ipc.questions import (
    ApprovalDecision,
    ApprovalDecisionResult,
    ConfigCheck,
    ConfigCheckResult,
    DeleteInstance,
    DeleteInstanceResult,
    ListRequest,
    ListResult,
    ModelPermitRequest,
    ModelPermitResult,
    PrepareInstance,
    PrepareInstanceResult,
    RestartInstance,
    RestartInstanceResult,
    SpawnRequest,
    SpawnResult,
)
from ipc.runtime_events import RawEvent

A, B, ORC, T = "alpha", "beta", wire.ORCHESTRATOR, "telegram"


def _err() -> m.IpcError:
    return m.TurnFailed("the model failed", details={"step": 2})


SAMPLES: dict[str, IpcMessage] = {
    "delegate_full": build.delegate(
        A,
        B,
        "corr_1",
        Handoff(
            target="beta",
            input="hello",
            instance_key="room-1",
            caller_instance_key="desk",
            trace_id="t" * 32,
            parent_span_id="span-1",
            call_chain=("user@default", "alpha@desk"),
            event_type="user.input",
            metadata={"lang": "ko", "n": [1, 2]},
            event_id="agent_event_1",
            timeout_ms=60000,
            background=True,
            source="gamma",
            stream_id="s-1",
            relay=True,
        ),
    ),
    "delegate_minimal": build.delegate(A, B, "corr_2", Handoff(target="beta", input="hi")),
    "delegate_result_ok": build.delegate_result(
        B,
        A,
        "corr_1",
        DelegateAnswer("ok", output="answer", turn={"turnId": "turn_1", "steps": 2}),
    ),
    "delegate_result_error": build.delegate_result(B, A, "corr_1", DelegateAnswer.failure(_err())),
    "shutdown": build.shutdown("alpha", ShutdownRequest(5000, "restart")),
    "ready": build.event(A, ORC, Ready(pid=41, scope="scope-1")),
    "ready_no_scope": build.event(A, ORC, Ready(pid=41)),
    "boot_failed": build.event(A, ORC, BootFailed(error="no key")),
    "status": build.event(A, ORC, StatusChanged(status="processing")),
    "turn_completed": build.event(A, ORC, TurnCompleted(instance_key="k", status="ok")),
    "shutdown_ack": build.event(A, ORC, ShutdownAck()),
    "runtime_event": build.event(
        A, ORC, RuntimeEventReport(RawEvent({"type": "turn.started", "n": 1}))
    ),
    "text_delta": build.event(
        A,
        ORC,
        TextDelta(
            stream_id="s-1",
            text="pie",
            trace_id="t1",
            instance_key="k",
            turn_id="turn_1",
            step_id="step_1",
        ),
    ),
    "text_delta_defaults": build.event(A, ORC, TextDelta(stream_id="s-1", text="pie")),
    "restart_request": build.event(A, ORC, RestartRequest(reason="tool:self-restart")),
    "send": build.event(
        A,
        ORC,
        Send(
            Handoff(
                target="beta",
                input="fyi",
                event_type="agent.send",
                event_id="agent_event_2",
                source="alpha",
            )
        ),
    ),
    "send_started": build.event(B, ORC, SendStarted(event_id="agent_event_2")),
    "send_done": build.event(B, ORC, SendDone(event_id="agent_event_2")),
    "send_refused": build.event(
        B, ORC, SendRefused(event_id="agent_event_2", error=m.ShuttingDown("draining"))
    ),
    "send_failed": build.event(
        ORC,
        A,
        SendFailed(
            event_id="agent_event_2",
            target="beta",
            instance_key="k",
            error=m.AgentCrashed("died", details={"exitCode": 1}),
        ),
    ),
    "spawn_request": build.event(
        A,
        ORC,
        SpawnRequest(target="beta", instance_key="k2", cwd="/tmp/w", owner_instance_key="desk"),
    ),
    "spawn_request_defaults": build.event(
        A,
        ORC,
        SpawnRequest(target="beta", instance_key=None, cwd=None, owner_instance_key="default"),
    ),
    "spawn_result": build.event(
        ORC, A, SpawnResult(target="beta", instance_key="k2", spawned=True, cwd="/tmp/w")
    ),
    "spawn_result_error": build.event(ORC, A, SpawnResult(error=m.AgentNotFound("no such agent"))),
    "list_request": build.event(A, ORC, ListRequest(owner_instance_key="desk", include_all=True)),
    "list_result": build.event(ORC, A, ListResult(agents=[{"agent": "beta", "instanceKey": "k2"}])),
    "config_check": build.event(A, ORC, ConfigCheck()),
    "config_check_result": build.event(ORC, A, ConfigCheckResult(errors=("bad: x", "worse: y"))),
    "prepare_instance": build.event(
        ORC,
        B,
        PrepareInstance(instance_key="k2", cwd="/tmp/w", owner="alpha", owner_instance_key="desk"),
    ),
    "prepare_instance_result": build.event(
        B, ORC, PrepareInstanceResult(instance_key="k2", created=True, cwd="/tmp/w")
    ),
    "prepare_instance_result_error": build.event(
        B, ORC, PrepareInstanceResult(error=m.IpcError("disk full", code="E_DISK"))
    ),
    "delete_instance": build.event(ORC, B, DeleteInstance(instance_key="k2")),
    "delete_instance_result": build.event(B, ORC, DeleteInstanceResult(ok=True, deleted=True)),
    "delete_instance_result_error": build.event(
        B, ORC, DeleteInstanceResult(ok=False, error="busy")
    ),
    "restart_instance": build.event(ORC, B, RestartInstance(instance_key="k2")),
    "restart_instance_result": build.event(
        B, ORC, RestartInstanceResult(ok=True, loaded=True, stopped_turns=2)
    ),
    "restart_instance_result_error": build.event(
        B, ORC, RestartInstanceResult(ok=False, error="gone")
    ),
    "approval_decision": build.event(
        ORC,
        B,
        ApprovalDecision(
            approval_id="appr_1",
            decision="approve",
            arguments={"path": "a.txt"},
            reason="fine",
            decided_by={"uid": 1000},
        ),
    ),
    "approval_decision_reject": build.event(
        ORC, B, ApprovalDecision(approval_id="appr_1", decision="reject")
    ),
    "approval_decision_result": build.event(
        B, ORC, ApprovalDecisionResult(approval={"id": "appr_1", "state": "approved"})
    ),
    "approval_decision_result_error": build.event(
        B,
        ORC,
        ApprovalDecisionResult(error=m.IpcError("no such approval", code=wire.APPROVAL_NOT_FOUND)),
    ),
    "cancel": build.event(ORC, B, Cancel(trace_id="t1", reason="stop")),
    "model_permit": build.event(
        B,
        ORC,
        ModelPermitRequest(
            pool="openai/gpt",
            trace_id="t1",
            instance_key="k",
            estimated_tokens=120,
            wait_ms=3000,
            max_output_tokens=512,
            reserved_cost=0.25,
        ),
        "corr_p1",
    ),
    "model_permit_defaults": build.event(
        B, ORC, ModelPermitRequest(pool="", trace_id="t1"), "corr_p2"
    ),
    "model_permit_result": build.event(ORC, B, ModelPermitResult(waited_ms=12), "corr_p1"),
    "model_permit_result_refused": build.event(
        ORC,
        B,
        ModelPermitResult(waited_ms=3000, error=m.PermitTimeout("no permit in 3s")),
        "corr_p1",
    ),
    "model_usage": build.event(
        B,
        ORC,
        ModelUsage(
            trace_id="t1",
            instance_key="k",
            permit_id="corr_p1",
            pool="openai/gpt",
            input_tokens=100,
            output_tokens=20,
            cost=0.5,
            retry_after_ms=2000,
        ),
    ),
    "model_usage_defaults": build.event(B, ORC, ModelUsage(trace_id="t1")),
    "connector_event": build.event(
        T,
        ORC,
        ConnectorEventReport(
            event_id="ev_1",
            name="message",
            text="hi bot",
            instance_key="chat-9",
            properties={"chat": "9"},
        ),
    ),
    "connector_event_settled": build.event(ORC, T, ConnectorEventSettled(event_id="ev_1")),
    "connector_event_settled_error": build.event(
        ORC, T, ConnectorEventSettled(event_id="ev_1", error="lost")
    ),
    "send_done_answer": build.event(B, ORC, SendDone(event_id="agent_event_2", answer="done")),
    "send_done_turn_error": build.event(
        B, ORC, SendDone(event_id="agent_event_2", turn_error="AGENT_TURN_FAILED: boom")
    ),
    "connector_event_settled_answer": build.event(
        ORC, T, ConnectorEventSettled(event_id="ev_1", answer="hello back", turn_error=None)
    ),
    "connector_event_settled_turn_error": build.event(
        ORC, T, ConnectorEventSettled(event_id="ev_1", turn_error="AGENT_TURN_FAILED: boom")
    ),
}
"""Each message as the code of both versions builds it (builders and constructors are the same)."""

OLD_FRAMES_TEXT = """
delegate_full - c0da0000015a85a474797065a864656c6567617465ad636f7272656c6174696f6e4964a6636f72725f31a466726f6da5616c706861a2746fa462657461a77061796c6f61648fa6746172676574a462657461a5696e707574a568656c6c6fab696e7374616e63654b6579a6726f6f6d2d31b163616c6c6572496e7374616e63654b6579a46465736ba774726163654964d9207474747474747474747474747474747474747474747474747474747474747474ac706172656e745370616e4964a67370616e2d31a963616c6c436861696e92ac757365724064656661756c74aa616c706861406465736ba96576656e7454797065aa757365722e696e707574a86d6574616461746182a46c616e67a26b6fa16e920102a76576656e744964ad6167656e745f6576656e745f31a974696d656f75744d73cdea60a56173796e63c3a6736f75726365a567616d6d61a873747265616d4964a3732d31a572656c6179c3
delegate_minimal callChain,callerInstanceKey,eventType,instanceKey,metadata c0da000000b085a474797065a864656c6567617465ad636f7272656c6174696f6e4964a6636f72725f32a466726f6da5616c706861a2746fa462657461a77061796c6f616487a6746172676574a462657461a5696e707574a26869ab696e7374616e63654b6579a764656661756c74b163616c6c6572496e7374616e63654b6579a764656661756c74a963616c6c436861696e90a96576656e7454797065ad6167656e742e72657175657374a86d6574616461746180
delegate_result_ok - c0da0000007a85a474797065af64656c65676174655f726573756c74ad636f7272656c6174696f6e4964a6636f72725f31a466726f6da462657461a2746fa5616c706861a77061796c6f616483a6737461747573a26f6ba66f7574707574a6616e73776572a47475726e82a67475726e4964a67475726e5f31a5737465707302
delegate_result_error - c0da0000009a85a474797065af64656c65676174655f726573756c74ad636f7272656c6174696f6e4964a6636f72725f31a466726f6da462657461a2746fa5616c706861a77061796c6f616482a6737461747573a56572726f72a56572726f7283a4636f6465b14147454e545f5455524e5f4641494c4544a76d657373616765b0746865206d6f64656c206661696c6564a764657461696c7381a47374657002
shutdown - c0da0000005384a474797065a873687574646f776ea466726f6dac6f7263686573747261746f72a2746fa5616c706861a77061796c6f616482ad6772616365506572696f644d73cd1388a6726561736f6ea772657374617274
ready - c0da0000004e84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64a57265616479a370696429a573636f7065a773636f70652d31
ready_no_scope scope c0da0000004784a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64a57265616479a370696429a573636f7065c0
boot_failed - c0da0000004e84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616482a46b696e64ab626f6f745f6661696c6564a56572726f72a66e6f206b6579
status - c0da0000004e84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616482a46b696e64a6737461747573a6737461747573aa70726f63657373696e67
turn_completed - c0da0000005c84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64ae7475726e5f636f6d706c65746564ab696e7374616e63654b6579a16ba6737461747573a26f6b
shutdown_ack - c0da0000004284a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616481a46b696e64ac73687574646f776e5f61636b
runtime_event - c0da0000005f84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616482a46b696e64ad72756e74696d655f6576656e74a56576656e7482a474797065ac7475726e2e73746172746564a16e01
text_delta - c0da0000008b84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616487a46b696e64aa746578745f64656c7461a873747265616d4964a3732d31a474657874a3706965a774726163654964a27431ab696e7374616e63654b6579a16ba67475726e4964a67475726e5f31a6737465704964a6737465705f31
text_delta_defaults instanceKey,stepId,traceId,turnId c0da0000008384a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616487a46b696e64aa746578745f64656c7461a873747265616d4964a3732d31a474657874a3706965a774726163654964a0ab696e7374616e63654b6579a764656661756c74a67475726e4964a0a6737465704964a0
restart_request reason c0da0000005e84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616482a46b696e64af726573746172745f72657175657374a6726561736f6eb1746f6f6c3a73656c662d72657374617274
send callChain,callerInstanceKey,instanceKey,metadata c0da000000cb84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f61648aa46b696e64a473656e64a6746172676574a462657461a5696e707574a3667969ab696e7374616e63654b6579a764656661756c74b163616c6c6572496e7374616e63654b6579a764656661756c74a963616c6c436861696e90a96576656e7454797065aa6167656e742e73656e64a86d6574616461746180a76576656e744964ad6167656e745f6576656e745f32a6736f75726365a5616c706861
send_started - c0da0000005784a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616482a46b696e64ac73656e645f73746172746564a76576656e744964ad6167656e745f6576656e745f32
send_done - c0da0000005484a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616482a46b696e64a973656e645f646f6e65a76576656e744964ad6167656e745f6576656e745f32
send_refused - c0da0000008284a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64ac73656e645f72656675736564a76576656e744964ad6167656e745f6576656e745f32a56572726f7282a4636f6465ad5348555454494e475f444f574ea76d657373616765a8647261696e696e67
send_failed - c0da000000ab84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa5616c706861a77061796c6f616485a46b696e64ab73656e645f6661696c6564a76576656e744964ad6167656e745f6576656e745f32a6746172676574a462657461ab696e7374616e63654b6579a16ba56572726f7283a4636f6465ad4147454e545f43524153484544a76d657373616765a464696564a764657461696c7381a865786974436f646501
spawn_request - c0da0000007f84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616485a46b696e64ad737061776e5f72657175657374a6746172676574a462657461ab696e7374616e63654b6579a26b32a3637764a62f746d702f77b06f776e6572496e7374616e63654b6579a46465736b
spawn_request_defaults cwd,instanceKey,ownerInstanceKey c0da0000007a84a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616485a46b696e64ad737061776e5f72657175657374a6746172676574a462657461ab696e7374616e63654b6579c0a3637764c0b06f776e6572496e7374616e63654b6579a764656661756c74
spawn_result status c0da0000007b84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa5616c706861a77061796c6f616486a46b696e64ac737061776e5f726573756c74a6737461747573a26f6ba6746172676574a462657461ab696e7374616e63654b6579a26b32a7737061776e6564c3a3637764a62f746d702f77
spawn_result_error - c0da0000008184a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa5616c706861a77061796c6f616483a46b696e64ac737061776e5f726573756c74a6737461747573a56572726f72a56572726f7282a4636f6465af4147454e545f4e4f545f464f554e44a76d657373616765ad6e6f2073756368206167656e74
list_request - c0da0000006484a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64ac6c6973745f72657175657374b06f776e6572496e7374616e63654b6579a46465736baa696e636c756465416c6cc3
list_result status c0da0000006e84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa5616c706861a77061796c6f616483a46b696e64ab6c6973745f726573756c74a6737461747573a26f6ba66167656e74739182a56167656e74a462657461ab696e7374616e63654b6579a26b32
config_check - c0da0000004284a474797065a56576656e74a466726f6da5616c706861a2746fac6f7263686573747261746f72a77061796c6f616481a46b696e64ac636f6e6669675f636865636b
config_check_result - c0da0000006184a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa5616c706861a77061796c6f616482a46b696e64b3636f6e6669675f636865636b5f726573756c74a66572726f727392a66261643a2078a8776f7273653a2079
prepare_instance - c0da0000008184a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616485a46b696e64b0707265706172655f696e7374616e6365ab696e7374616e63654b6579a26b32a3637764a62f746d702f77a56f776e6572a5616c706861b06f776e6572496e7374616e63654b6579a46465736b
prepare_instance_result - c0da0000007384a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616485a46b696e64b7707265706172655f696e7374616e63655f726573756c74a26f6bc3a763726561746564c3ab696e7374616e63654b6579a26b32a3637764a62f746d702f77
prepare_instance_result_error ok c0da0000007584a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64b7707265706172655f696e7374616e63655f726573756c74a26f6bc2a56572726f7282a4636f6465a6455f4449534ba76d657373616765a96469736b2066756c6c
delete_instance - c0da0000005384a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616482a46b696e64af64656c6574655f696e7374616e6365ab696e7374616e63654b6579a26b32
delete_instance_result - c0da0000005884a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64b664656c6574655f696e7374616e63655f726573756c74a26f6bc3a764656c65746564c3
delete_instance_result_error ok c0da0000005a84a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64b664656c6574655f696e7374616e63655f726573756c74a26f6bc2a56572726f72a462757379
restart_instance - c0da0000005484a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616482a46b696e64b0726573746172745f696e7374616e6365ab696e7374616e63654b6579a26b32
restart_instance_result - c0da0000006684a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616484a46b696e64b7726573746172745f696e7374616e63655f726573756c74a26f6bc3a66c6f61646564c3ac73746f707065645475726e7302
restart_instance_result_error ok c0da0000005b84a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64b7726573746172745f696e7374616e63655f726573756c74a26f6bc2a56572726f72a4676f6e65
approval_decision - c0da0000009d84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616486a46b696e64b1617070726f76616c5f6465636973696f6eaa617070726f76616c4964a6617070725f31a86465636973696f6ea7617070726f7665a9617267756d656e747381a470617468a5612e747874a6726561736f6ea466696e65a964656369646564427981a3756964cd03e8
approval_decision_reject - c0da0000006884a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616483a46b696e64b1617070726f76616c5f6465636973696f6eaa617070726f76616c4964a6617070725f31a86465636973696f6ea672656a656374
approval_decision_result - c0da0000007484a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64b8617070726f76616c5f6465636973696f6e5f726573756c74a26f6bc3a8617070726f76616c82a26964a6617070725f31a57374617465a8617070726f766564
approval_decision_result_error ok c0da0000008984a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64b8617070726f76616c5f6465636973696f6e5f726573756c74a26f6bc2a56572726f7282a4636f6465b2415050524f56414c5f4e4f545f464f554e44a76d657373616765b06e6f207375636820617070726f76616c
cancel - c0da0000005284a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616483a46b696e64a663616e63656ca774726163654964a27431a6726561736f6ea473746f70
model_permit - c0da000000c485a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616488a46b696e64ac6d6f64656c5f7065726d6974a4706f6f6caa6f70656e61692f677074a774726163654964a27431ab696e7374616e63654b6579a16baf657374696d61746564546f6b656e7378a6776169744d73cd0bb8af6d61784f7574707574546f6b656e73cd0200ac7265736572766564436f7374cb3fd0000000000000ad636f7272656c6174696f6e4964a7636f72725f7031
model_permit_defaults estimatedTokens,instanceKey,pool,waitMs c0da0000009585a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616486a46b696e64ac6d6f64656c5f7065726d6974a4706f6f6ca0a774726163654964a27431ab696e7374616e63654b6579a764656661756c74af657374696d61746564546f6b656e7300a6776169744d7300ad636f7272656c6174696f6e4964a7636f72725f7032
model_permit_result - c0da0000007185a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616483a46b696e64b36d6f64656c5f7065726d69745f726573756c74a76772616e746564c3a87761697465644d730cad636f7272656c6174696f6e4964a7636f72725f7031
model_permit_result_refused granted c0da000000ae85a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa462657461a77061796c6f616484a46b696e64b36d6f64656c5f7065726d69745f726573756c74a76772616e746564c2a87761697465644d73cd0bb8a56572726f7282a4636f6465b6455f4d4f44454c5f5045524d49545f54494d454f5554a76d657373616765af6e6f207065726d697420696e203373ad636f7272656c6174696f6e4964a7636f72725f7031
model_usage - c0da000000b384a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616489a46b696e64ab6d6f64656c5f7573616765a774726163654964a27431ab696e7374616e63654b6579a16ba87065726d69744964a7636f72725f7031a4706f6f6caa6f70656e61692f677074ab696e707574546f6b656e7364ac6f7574707574546f6b656e7314a4636f7374cb3fe0000000000000ac726574727941667465724d73cd07d0
model_usage_defaults inputTokens,instanceKey,outputTokens c0da0000007a84a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616485a46b696e64ab6d6f64656c5f7573616765a774726163654964a27431ab696e7374616e63654b6579a764656661756c74ab696e707574546f6b656e7300ac6f7574707574546f6b656e7300
connector_event - c0da0000009484a474797065a56576656e74a466726f6da874656c656772616da2746fac6f7263686573747261746f72a77061796c6f616486a46b696e64af636f6e6e6563746f725f6576656e74a76576656e744964a465765f31a46e616d65a76d657373616765a474657874a6686920626f74ab696e7374616e63654b6579a6636861742d39aa70726f7065727469657381a463686174a139
connector_event_settled - c0da0000005d84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa874656c656772616da77061796c6f616482a46b696e64b7636f6e6e6563746f725f6576656e745f736574746c6564a76576656e744964a465765f31
connector_event_settled_error - c0da0000006884a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa874656c656772616da77061796c6f616483a46b696e64b7636f6e6e6563746f725f6576656e745f736574746c6564a76576656e744964a465765f31a56572726f72a46c6f7374
send_done_answer - c0da0000006084a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64a973656e645f646f6e65a76576656e744964ad6167656e745f6576656e745f32a6616e73776572a4646f6e65
send_done_turn_error - c0da0000007684a474797065a56576656e74a466726f6da462657461a2746fac6f7263686573747261746f72a77061796c6f616483a46b696e64a973656e645f646f6e65a76576656e744964ad6167656e745f6576656e745f32a97475726e4572726f72b74147454e545f5455524e5f4641494c45443a20626f6f6d
connector_event_settled_answer - c0da0000006f84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa874656c656772616da77061796c6f616483a46b696e64b7636f6e6e6563746f725f6576656e745f736574746c6564a76576656e744964a465765f31a6616e73776572aa68656c6c6f206261636b
connector_event_settled_turn_error - c0da0000007f84a474797065a56576656e74a466726f6dac6f7263686573747261746f72a2746fa874656c656772616da77061796c6f616483a46b696e64b7636f6e6e6563746f725f6576656e745f736574746c6564a76576656e744964a465765f31a97475726e4572726f72b74147454e545f5455524e5f4641494c45443a20626f6f6d
"""
"""One line per sample: its name, the payload keys the old reader defaulted (``-``: none), and
the old encoder's frame in hex."""

OLD_FRAMES = [
    (name, () if keys == "-" else tuple(keys.split(",")), bytes.fromhex(frame))
    for name, keys, frame in (line.split() for line in OLD_FRAMES_TEXT.strip().splitlines())
]
NAMES = [name for name, _, _ in OLD_FRAMES]
ADDED_SINCE = {"connector_health", "leader_changed"}
"""Event kinds younger than the old frames."""


def _read(message: IpcMessage) -> Any:
    """The typed payload of ``message``, read as its receiver reads it."""
    if isinstance(message, DelegateMessage):
        return Handoff.from_wire(message.payload)
    if isinstance(message, DelegateResultMessage):
        return DelegateAnswer.from_wire(message.payload)
    if isinstance(message, ShutdownMessage):
        return ShutdownRequest.from_wire(message.payload, 1234)
    assert isinstance(message, EventMessage)
    return read_event(message)


def _fields(body: msgspec.Struct) -> tuple[type, dict[str, Any]]:
    """``body``'s type and fields, an error (which has no ``==``) by its wire form."""
    values = msgspec.structs.asdict(body)
    for name, value in values.items():
        if isinstance(value, m.IpcError):
            values[name] = value.to_dict()
        elif isinstance(value, msgspec.Struct):
            values[name] = _fields(value)
    return type(body), values


def _plain(frame: bytes) -> dict[str, Any]:
    """A frame's body as plain msgpack, no schema."""
    body: dict[str, Any] = msgspec.msgpack.decode(frame[HEADER_SIZE:])
    return body


def test_every_sample_has_an_old_frame_and_every_kind_a_sample() -> None:
    assert list(SAMPLES) == NAMES
    kinds = {message.kind for message in SAMPLES.values() if isinstance(message, EventMessage)}
    assert kinds == {kind.value for kind in wire.EventKind} - ADDED_SINCE


@pytest.mark.parametrize(("name", "droppable", "frame"), OLD_FRAMES, ids=NAMES)
def test_an_old_frame_reads_as_the_message_it_was_built_from(
    name: str, droppable: tuple[str, ...], frame: bytes
) -> None:
    [decoded] = FrameDecoder().feed(frame)
    expected = SAMPLES[name]
    assert isinstance(decoded, type(expected))
    assert (decoded.sender, decoded.to, decoded.correlation_id) == (
        expected.sender,
        expected.to,
        expected.correlation_id,
    )
    assert _fields(_read(decoded)) == _fields(_read(expected))


@pytest.mark.parametrize(("name", "droppable", "frame"), OLD_FRAMES, ids=NAMES)
def test_a_new_frame_carries_what_the_old_reader_needs(
    name: str, droppable: tuple[str, ...], frame: bytes
) -> None:
    old, new = _plain(frame), _plain(encode(SAMPLES[name]))
    old_payload, new_payload = old.pop("payload"), new.pop("payload", {})
    assert new == old  # the envelope did not change
    # the same keys with the same values, less fields at the default the old reader assumes
    assert {key: old_payload[key] for key in new_payload} == new_payload
    assert set(old_payload) - set(new_payload) <= set(droppable)


def test_a_delegate_with_a_field_of_the_wrong_type_decodes_and_names_the_field() -> None:
    message = DelegateMessage(
        sender="alpha", to="beta", correlation_id="c7", payload={"target": "beta", "input": 3}
    )
    [decoded] = FrameDecoder().feed(encode(message))
    assert isinstance(decoded, DelegateMessage)
    assert decoded.correlation_id == "c7"  # the envelope decoded: the caller can be answered
    with pytest.raises(wire.MalformedPayload) as refused:
        Handoff.from_wire(decoded.payload)
    assert refused.value.code == "IPC_MALFORMED_PAYLOAD"
    assert refused.value.details == {"field": "input"}
    assert "Expected `str`, got `int` - at `$.input`" in refused.value.message


def test_a_field_added_by_a_newer_peer_is_ignored() -> None:
    payload = {**Handoff(target="b", input="hi").to_wire(), "priority": 3}
    assert Handoff.from_wire(payload) == Handoff(target="b", input="hi")
