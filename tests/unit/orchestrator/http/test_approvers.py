"""Who may decide an approval, against a /proc made of files: every way of being an agent's
process is refused, every process that cannot be made out is refused, an operator's is taken."""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from pathlib import Path

import pytest

from ipc.scope import SCOPE_ENV
from orchestrator.callers import Caller, Peer
from orchestrator.http.approvers import ProcFs, SwarmProcesses, why_refused

DAEMON, AGENT, CONNECTOR = 100, 200, 300
EUID = 1000
SWARM = SwarmProcesses(
    pids={AGENT: "agent 'worker'", CONNECTOR: "connection 'tg'"},
    scopes={"200-abc": "agent 'worker'"},
    daemon_pid=DAEMON,
    euid=EUID,
)


class FakeProc:
    """A /proc tree: processes with a parent and an environment, sockets and descriptors."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "net").mkdir(parents=True)
        self.tcp_lines: list[str] = []

    def process(self, pid: int, parent: int, environ: bytes | None = b"PATH=/bin\0") -> None:
        directory = self.root / str(pid)
        (directory / "fd").mkdir(parents=True)
        # A command name with spaces and parentheses, as a program may choose.
        (directory / "stat").write_text(f"{pid} (a (b) c) S {parent} {pid} {pid} 0 -1\n")
        if environ is not None:
            (directory / "environ").write_bytes(environ)

    def holds(self, pid: int, inode: int) -> None:
        os.symlink(f"socket:[{inode}]", self.root / str(pid) / "fd" / "3")

    def tcp(self, here: tuple[str, int], there: tuple[str, int], uid: int, inode: int) -> None:
        name = "tcp6" if ":" in here[0] else "tcp"
        self.tcp_lines.append(
            f"   0: {encode(*here)} {encode(*there)} 01 00000000:00000000 00:00000000 "
            f"00000000 {uid:>5} 0 {inode} 1 0000000000000000 20 4 30 10 -1"
        )
        header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when ...\n"
        (self.root / "net" / name).write_text(header + "\n".join(self.tcp_lines) + "\n")


def encode(host: str, port: int) -> str:
    """An address as /proc/net/tcp prints it: 32-bit words in host order, in hex."""
    raw = ipaddress.ip_address(host).packed
    words = struct.unpack(f"={len(raw) // 4}I", raw)
    return "".join(f"{word:08X}" for word in words) + f":{port:04X}"


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    fake = FakeProc(tmp_path / "proc")
    fake.process(DAEMON, 50)
    fake.process(50, 1)  # the operator's shell, which started the daemon
    fake.process(AGENT, DAEMON + 1)
    fake.process(DAEMON + 1, DAEMON)  # the fork server
    fake.process(CONNECTOR, DAEMON + 1)
    return fake


def unix(pid: int, uid: int = EUID) -> Caller:
    return Caller("unix", pid=pid, uid=uid, gid=uid)


def refusal(caller: Caller, proc: FakeProc, peer: Peer | None = None) -> str | None:
    return why_refused(caller, peer, SWARM, ProcFs(proc.root))[1]


def test_an_operators_process_may_decide(proc: FakeProc) -> None:
    proc.process(60, 50)  # `goondan approve` in the operator's shell
    assert refusal(unix(60), proc) is None


def test_the_daemon_and_what_it_starts_itself_may_decide(proc: FakeProc) -> None:
    proc.process(70, DAEMON)
    assert refusal(unix(DAEMON), proc) is None
    assert refusal(unix(70), proc) is None


def test_an_agent_process_may_not(proc: FakeProc) -> None:
    why = refusal(unix(AGENT), proc)
    assert why is not None
    assert "is the process of agent 'worker'" in why


@pytest.mark.parametrize("started_by", [AGENT, CONNECTOR])
def test_a_program_started_by_an_agent_or_connector_may_not(
    proc: FakeProc, started_by: int
) -> None:
    proc.process(210, started_by, environ=b"PATH=/bin\0")  # its scope dropped, not its parent
    proc.process(211, 210, environ=b"PATH=/bin\0")
    why = refusal(unix(211), proc)
    assert why is not None
    assert f"was started by {SWARM.pids[started_by]} (pid {started_by})" in why


def test_a_detached_program_carrying_an_agents_scope_may_not(proc: FakeProc) -> None:
    proc.process(220, 1, environ=f"PATH=/bin\0{SCOPE_ENV}=200-abc\0".encode())
    why = refusal(unix(220), proc)
    assert why is not None
    assert f"carries the process scope of agent 'worker' ({SCOPE_ENV}" in why


def test_the_scope_of_another_swarms_agent_counts_too(proc: FakeProc) -> None:
    proc.process(230, 50, environ=f"{SCOPE_ENV}=999-elsewhere\0".encode())
    why = refusal(unix(230), proc)
    assert why is not None
    assert "an agent of another swarm" in why


def test_an_ancestor_carrying_a_scope_counts(proc: FakeProc) -> None:
    proc.process(240, 1, environ=f"{SCOPE_ENV}=200-abc\0".encode())
    proc.process(241, 240, environ=b"")  # cleared its own environment
    why = refusal(unix(241), proc)
    assert why is not None
    assert "its ancestor (pid 240) carries the process scope of agent 'worker'" in why


def test_a_marker_inside_another_variable_is_no_scope(proc: FakeProc) -> None:
    proc.process(250, 50, environ=f"NOTE={SCOPE_ENV}=200-abc\0".encode())
    assert refusal(unix(250), proc) is None


def test_a_pid_from_another_namespace_is_refused(proc: FakeProc) -> None:
    why = refusal(unix(0), proc)
    assert why is not None
    assert "pid 0" in why


def test_a_process_gone_before_the_check_is_refused(proc: FakeProc) -> None:
    why = refusal(unix(999), proc)
    assert why is not None
    assert "/proc/999/stat cannot be read" in why


def test_the_walk_ends_at_an_ancestor_hidden_from_the_daemon(proc: FakeProc) -> None:
    proc.process(260, 261)  # its parent is another user's, hidden by /proc's hidepid
    assert refusal(unix(260), proc) is None


class ParentExits(ProcFs):
    """A /proc where the caller's parent exits while the check reads it: the caller is handed
    to ``adopter``."""

    def __init__(self, root: Path, child: int, adopter: int) -> None:
        super().__init__(root)
        self.child, self.adopter, self.reads = child, adopter, 0

    def parent(self, pid: int) -> int | None:
        if pid == self.child:
            self.reads += 1
            if self.reads > 1:
                return self.adopter
        return super().parent(pid)


def test_a_parent_that_exits_mid_walk_is_followed_by_the_new_one(proc: FakeProc) -> None:
    proc.process(262, 263)  # 263 has just exited; 262 goes to the rogue's connector
    moved = ParentExits(proc.root, child=262, adopter=CONNECTOR)
    why = why_refused(unix(262), None, SWARM, moved)[1]
    assert why is not None
    assert "was started by connection 'tg'" in why
    assert moved.reads == 2


def test_a_hidden_environment_is_refused_for_the_daemons_user_only(proc: FakeProc) -> None:
    proc.process(270, 50, environ=None)
    why = refusal(unix(270, uid=EUID), proc)
    assert why is not None
    assert "environment (pid 270) cannot be read" in why
    assert refusal(unix(270, uid=0), proc) is None  # root's, which the daemon may not read


def test_a_loop_in_the_parents_ends(proc: FakeProc) -> None:
    proc.process(280, 281)
    proc.process(281, 280)
    why = refusal(unix(280), proc)
    assert why is not None
    assert "too long" in why


def test_a_caller_of_unknown_connection_is_refused_unless_it_holds_a_token(
    proc: FakeProc,
) -> None:
    assert refusal(Caller("unknown"), proc) == "the caller cannot be identified"
    assert refusal(Caller("unknown", token="OPS"), proc) is None


def tcp_peer(host: str, port: int, local: tuple[str, int] = ("127.0.0.1", 8080)) -> Peer:
    return Peer(socket.AF_INET, address=(host, port), local=local)


def test_a_loopback_tcp_peer_is_looked_up_by_its_socket(proc: FakeProc) -> None:
    proc.process(290, AGENT)
    proc.holds(290, 5555)
    proc.tcp(("127.0.0.1", 41000), ("127.0.0.1", 8080), EUID, 5555)
    proc.process(60, 50)
    proc.holds(60, 6666)
    proc.tcp(("127.0.0.1", 42000), ("127.0.0.1", 8080), EUID, 6666)
    proc.tcp(("127.0.0.1", 8080), ("127.0.0.1", 42000), EUID, 7777)  # our own end

    agent = Caller("tcp", address="127.0.0.1:41000", token="OPS")
    found, why = why_refused(agent, tcp_peer("127.0.0.1", 41000), SWARM, ProcFs(proc.root))
    assert why is not None
    assert "was started by agent 'worker'" in why  # a token does not make an agent an operator
    assert (found.pid, found.uid) == (290, EUID)

    operator = Caller("tcp", address="127.0.0.1:42000")
    found, why = why_refused(operator, tcp_peer("127.0.0.1", 42000), SWARM, ProcFs(proc.root))
    assert why is None
    assert (found.pid, found.uid, found.to_json()["anonymous"]) == (60, EUID, True)


def test_an_ipv6_and_a_mapped_ipv4_loopback_peer_are_found(proc: FakeProc) -> None:
    proc.process(291, AGENT)
    proc.holds(291, 8888)
    proc.tcp(("::1", 43000), ("::1", 8080), EUID, 8888)
    peer = Peer(socket.AF_INET6, address=("::1", 43000), local=("::1", 8080))
    assert refusal(Caller("tcp"), proc, peer) is not None
    proc.process(292, AGENT)
    proc.holds(292, 9999)
    proc.tcp(("127.0.0.1", 44000), ("127.0.0.1", 8080), EUID, 9999)
    mapped = Peer(
        socket.AF_INET6, address=("::ffff:127.0.0.1", 44000), local=("::ffff:127.0.0.1", 8080)
    )
    assert refusal(Caller("tcp"), proc, mapped) is not None


def test_a_loopback_peer_that_cannot_be_found_needs_a_token(proc: FakeProc) -> None:
    peer = tcp_peer("127.0.0.1", 45000)
    assert "not listed" in (refusal(Caller("tcp"), proc, peer) or "")
    assert refusal(Caller("tcp", token="OPS"), proc, peer) is None
    proc.tcp(("127.0.0.1", 45000), ("127.0.0.1", 8080), EUID, 1234)  # nobody holds it
    assert "no process holding" in (refusal(Caller("tcp"), proc, peer) or "")
    assert refusal(Caller("tcp", token="OPS"), proc, peer) is None


def test_another_users_loopback_peer_is_taken_with_its_uid(proc: FakeProc) -> None:
    proc.tcp(("127.0.0.1", 46000), ("127.0.0.1", 8080), 2000, 4321)  # its fds are not ours
    found, why = why_refused(Caller("tcp"), tcp_peer("127.0.0.1", 46000), SWARM, ProcFs(proc.root))
    assert why is None
    assert (found.uid, found.pid) == (2000, None)


def test_a_peer_of_another_host_is_the_tokens(proc: FakeProc) -> None:
    peer = tcp_peer("10.0.0.7", 50000, local=("10.0.0.1", 8080))
    assert refusal(Caller("tcp", address="10.0.0.7:50000", token="OPS"), proc, peer) is None


def test_a_peer_on_one_of_the_hosts_own_addresses_is_looked_up(proc: FakeProc) -> None:
    proc.process(293, AGENT)
    proc.holds(293, 3333)
    proc.tcp(("10.0.0.1", 47000), ("10.0.0.1", 8080), EUID, 3333)
    peer = tcp_peer("10.0.0.1", 47000, local=("10.0.0.1", 8080))
    why = refusal(Caller("tcp", address="10.0.0.1:47000", token="OPS"), proc, peer)
    assert why is not None
    assert "was started by agent 'worker'" in why
