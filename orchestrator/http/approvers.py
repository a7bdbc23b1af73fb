"""Who may decide an approval: an operator, never the swarm's own agents.

An approval exists so that a human looks at a tool call before it runs. Agents and the
programs their tools start run as the daemon's user, so ``api.sock``'s file mode lets them in
like the operator; if an agent's shell could approve another agent's parked call, the policy
would be a formality. So a decision is refused (403, :data:`APPROVAL_FORBIDDEN`) when the
process that made it is one of the swarm's agent or connector processes, descends from one
(``/proc/<pid>/stat``, parent by parent), or carries an agent's process scope
(``GOONDAN_AGENT_SCOPE`` in ``/proc/<pid>/environ``, which every program a tool starts
inherits however it detaches; any agent's, this swarm's or another's: an agent is not an
operator of any swarm).

Which process made it:

* on ``api.sock``, the pid ``SO_PEERCRED`` reported when the connection was made;
* on TCP from this host (loopback, or one of the host's own addresses), the process holding
  the peer's socket (its inode found in ``/proc/net/tcp``, then among the descriptors of
  ``/proc/*/fd``), checked the same way whether the request carried a token or not;
* from another host there is no process to look at: a listener off loopback requires a
  token, and agents never hold it.

When the process cannot be made out the decision is refused rather than taken, since it
could be an agent's: a pid of 0 (the peer lives in a PID namespace the daemon cannot see), a
process gone before it was checked, an environment that cannot be read although the process
runs as the daemon's user (a program can make itself undumpable to hide it). An operator in
another PID namespace decides from the daemon's (``docker exec``), or over TCP with a token.
What the daemon cannot see because it is another user's is not one of ours (agents and their
programs run as the daemon's user, and the daemon sees its own user's processes): the walk up
the parents ends at an ancestor hidden from it (``sudo``, under ``/proc``'s ``hidepid``), and
on a loopback listener without a token a peer of another user (whose descriptors the daemon
may not read) is taken, as before, with its uid.

What this does not see: a program that both clears its environment and leaves its agent's
process tree (``env -i setsid -f ...``, whose parent becomes init), or that has something
else start a process for it (``systemd-run``, ``ssh localhost``). The sandbox that hides
``api.sock`` from tool programs is the first line; this check is the second.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
import struct
from dataclasses import replace
from pathlib import Path

import structlog
from starlette.requests import Request

from goondan.errors import HttpCode
from goondan.loopback import is_loopback
from ipc import ORCHESTRATOR
from ipc.runtime_events import ApprovalRefusedEvent
from ipc.scope import SCOPE_ENV
from orchestrator.callers import PEER_KEY, Caller, Peer, caller_of, user_name
from orchestrator.http.responses import AnswerResponse, error
from orchestrator.operations import SwarmOperations, SwarmProcesses

APPROVAL_FORBIDDEN = HttpCode.APPROVAL_FORBIDDEN
"""The decision came from a process that may not decide (HTTP 403)."""
MAX_ANCESTORS = 4096
"""Parents followed at most (a chain is never this long; the bound keeps a lie finite)."""

_SCOPE_MARKER = f"{SCOPE_ENV}=".encode()
_log = structlog.get_logger("goondan.approvals")


class ProcFs:
    """What the check reads of ``/proc`` (another root in tests)."""

    def __init__(self, root: Path = Path("/proc")) -> None:
        self.root = root

    def parent(self, pid: int) -> int | None:
        """The parent pid of ``pid``; ``None`` when ``/proc/<pid>/stat`` cannot be read."""
        try:
            stat = (self.root / str(pid) / "stat").read_bytes()
        except OSError:
            return None
        # The command name (field 2) may hold spaces and parentheses: fields follow the last ")".
        fields = stat.rpartition(b")")[2].split()
        try:
            return int(fields[1])
        except (IndexError, ValueError):
            return None

    def environ(self, pid: int) -> bytes | None:
        """The environment ``pid`` was started with; ``None`` when it cannot be read."""
        try:
            with open(self.root / str(pid) / "environ", "rb", buffering=0) as environ:
                return environ.read()
        except OSError:
            return None

    def tcp_socket(self, peer: tuple[str, int], local: tuple[str, int]) -> tuple[int, int] | None:
        """``(uid, inode)`` of the TCP socket at ``peer`` connected to ``local`` (both on this
        host's loopback), from ``/proc/net/tcp`` and ``tcp6``; ``None`` if not listed."""
        wanted = (_normal(peer[0]), peer[1], _normal(local[0]), local[1])
        for name in ("tcp", "tcp6"):
            try:
                lines = (self.root / "net" / name).read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                fields = line.split()
                if len(fields) < 10:
                    continue
                try:
                    here, there = _endpoint(fields[1]), _endpoint(fields[2])
                    if (*here, *there) == wanted:
                        return int(fields[7]), int(fields[9])
                except ValueError:
                    continue
        return None

    def holders(self, inode: int) -> list[int]:
        """Pids of the processes with socket ``inode`` open (those whose descriptors the
        daemon may read)."""
        target = f"socket:[{inode}]"
        found = []
        with contextlib.suppress(OSError):
            for entry in os.scandir(self.root):
                if not entry.name.isdigit():
                    continue
                try:
                    with os.scandir(os.path.join(entry.path, "fd")) as fds:
                        if any(_link(fd.path) == target for fd in fds):
                            found.append(int(entry.name))
                except OSError:  # gone, or not ours to look into
                    continue
        return sorted(found)


def _link(path: str) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


def _normal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """``host`` as an address, an IPv4-mapped IPv6 one as plain IPv4 (a dual-stack listener
    sees an IPv4 peer so; the peer's own socket lists it as IPv4)."""
    address = ipaddress.ip_address(host.partition("%")[0])
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _endpoint(text: str) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]:
    """``0100007F:1F90`` (``/proc/net/tcp``: the address as 32-bit words in host order, the
    port in hex) → ``(127.0.0.1, 8080)``; raises ``ValueError``."""
    address, _, port = text.partition(":")
    if len(address) not in (8, 32):
        raise ValueError(f"not an address: {text!r}")
    raw = b"".join(
        struct.pack("=I", int(address[i : i + 8], 16)) for i in range(0, len(address), 8)
    )
    return _normal(str(ipaddress.ip_address(raw))), int(port, 16)


def why_refused(
    caller: Caller, peer: Peer | None, swarm: SwarmProcesses, proc: ProcFs | None = None
) -> tuple[Caller, str | None]:
    """Why ``caller`` (on a connection with ``peer``) may not decide an approval, or ``None``;
    with the caller completed by what was found of it (a loopback TCP peer's process).

    Reads ``/proc``: call it off the event loop.
    """
    proc = proc or ProcFs()
    if caller.via == "unix":
        return caller, _unix_refusal(caller, swarm, proc)
    if caller.via != "tcp" or peer is None or peer.address is None or peer.local is None:
        return caller, None if caller.token else "the caller cannot be identified"
    return _tcp_refusal(caller, peer.address, peer.local, swarm, proc)


def _unix_refusal(caller: Caller, swarm: SwarmProcesses, proc: ProcFs) -> str | None:
    """Why a caller over the Unix socket may not decide, or ``None``."""
    if not caller.pid:
        return (
            "the caller's process cannot be seen from the daemon (SO_PEERCRED reports pid "
            "0: another PID namespace), so it cannot be told apart from an agent's; decide "
            "from the daemon's PID namespace, or over TCP with a token"
        )
    return _agent_process(caller.pid, caller.uid, swarm, proc)


def _tcp_refusal(
    caller: Caller,
    address: tuple[str, int],
    local: tuple[str, int],
    swarm: SwarmProcesses,
    proc: ProcFs,
) -> tuple[Caller, str | None]:
    """Why a caller over TCP from ``address`` to ``local`` may not decide, or ``None``; with
    the caller completed by the process holding its socket, when it is on this host."""
    # Listed in /proc/net/tcp: the peer is on this host (over loopback, or one of its own
    # addresses), and its process can be looked at.
    found = proc.tcp_socket(address, local)
    if found is None:
        return caller, _unlisted(caller, address)
    uid, inode = found
    holders = proc.holders(inode)
    caller = replace(caller, uid=uid, user=user_name(uid), pid=holders[0] if holders else None)
    for pid in holders:
        why = _agent_process(pid, uid, swarm, proc)
        if why is not None:
            return replace(caller, pid=pid), why
    ours = uid == swarm.euid or swarm.euid == 0
    if not holders and caller.token is None and ours:
        return caller, (
            f"no process holding the caller's socket (uid {uid}) can be found, so it "
            "cannot be told apart from an agent's"
        )
    return caller, None


def _unlisted(caller: Caller, address: tuple[str, int]) -> str | None:
    """Why a TCP caller whose socket ``/proc/net/tcp`` does not list may not decide, or
    ``None``."""
    if caller.token or not is_loopback(address[0]):
        return None  # another host: the token is the check, and agents hold none
    unknown = "the caller's socket is not listed in /proc/net/tcp"
    return f"{unknown}, so it cannot be told apart from an agent's"


def _agent_process(pid: int, uid: int | None, swarm: SwarmProcesses, proc: ProcFs) -> str | None:
    """Why process ``pid`` (running as ``uid``) counts as an agent's, or ``None``."""
    child: int | None = None
    current = pid
    for _ in range(MAX_ANCESTORS):
        if current == swarm.daemon_pid:
            return None  # the daemon, or what it started itself and not through an agent
        label = swarm.pids.get(current)
        if label is not None:
            return _started_by(pid, current, label)
        parent = proc.parent(current)
        if parent is None:
            if child is None:
                return _unreadable(pid, current)
            # Gone (its child was handed to another parent), or alive and hidden from the
            # daemon (another user's, under /proc's hidepid): agents run as the daemon's
            # user and are never hidden from it, so the walk ends there.
            again = proc.parent(child)
            if again == current:
                return None
            if again is None:
                return _unreadable(pid, child)  # gone itself meanwhile
            current = again
            continue
        why = _scope_refusal(pid, uid, current, swarm, proc)
        if why is not None:
            return why
        if parent <= 1:
            return None  # reached init (or a process of a namespace's own)
        child, current = current, parent
    return f"the caller's (pid {pid}) chain of parents is too long to check"


def _started_by(pid: int, current: int, label: str) -> str:
    """The caller ``pid`` is, or descends from, the agent process ``current`` (``label``)."""
    if current == pid:
        return f"the caller (pid {pid}) is the process of {label}"
    return f"the caller (pid {pid}) was started by {label} (pid {current})"


def _unreadable(pid: int, current: int) -> str:
    """The caller ``pid`` cannot be checked: its ancestor ``current`` cannot be read."""
    return (
        f"the caller (pid {pid}) cannot be checked: /proc/{current}/stat cannot be "
        "read (did it exit?)"
    )


def _scope_refusal(
    pid: int, uid: int | None, current: int, swarm: SwarmProcesses, proc: ProcFs
) -> str | None:
    """Why the environment of ``current`` (the caller ``pid`` or an ancestor) makes it an
    agent's (it carries a process scope, or the caller's own cannot be read), or ``None``."""
    environ = proc.environ(current)
    if environ is None and current == pid and (uid == swarm.euid or swarm.euid == 0):
        return (
            f"the caller's environment (pid {pid}) cannot be read, so whether it carries "
            "an agent's process scope cannot be told"
        )
    scope = _scope_in(environ or b"")
    if scope is None:
        return None
    owner = swarm.scopes.get(scope, "an agent of another swarm")
    whose = "the caller" if current == pid else f"its ancestor (pid {current})"
    return f"{whose} carries the process scope of {owner} ({SCOPE_ENV}; pid {pid})"


def _scope_in(environ: bytes) -> str | None:
    """The value of ``GOONDAN_AGENT_SCOPE`` in a NUL-separated environment, if any."""
    if _SCOPE_MARKER not in environ:
        return None
    for entry in environ.split(b"\0"):
        if entry.startswith(_SCOPE_MARKER):
            return entry[len(_SCOPE_MARKER) :].decode(errors="replace")
    return None


async def vet_decider(
    daemon: SwarmOperations, request: Request, approval_id: str
) -> Caller | AnswerResponse:
    """The :class:`Caller` deciding ``approval_id`` through ``request``, or the 403 refusing
    it (logged, and recorded as an ``approval.refused`` runtime event)."""
    caller, peer = caller_of(request), request.scope.get(PEER_KEY)
    swarm = daemon.processes()
    caller, why = await asyncio.to_thread(
        why_refused, caller, peer if isinstance(peer, Peer) else None, swarm
    )
    if why is None:
        return caller
    record = daemon.approval(approval_id)
    _log.warning(
        "approval decision refused",
        approval_id=approval_id,
        decided_by=caller.to_json(),
        reason=why,
    )
    refused = ApprovalRefusedEvent(
        approval_id=approval_id,
        instance_key=record.instance_key if record is not None else None,
        trace_id=(record.trace_id or None) if record is not None else None,
        tool_name=record.tool_name if record is not None else None,
        decided_by=caller.to_json(),
        reason=why,
    )
    agent = record.agent_name if record is not None and record.agent_name else ORCHESTRATOR
    daemon.record(refused, agent)
    message = f"approvals are decided by an operator, not by the swarm's agents: {why}"
    return error(403, APPROVAL_FORBIDDEN, message)
