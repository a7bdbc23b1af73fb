"""The network proxy's listening sockets, made inside a sandbox's own network namespace.

A sandboxed program always gets a network namespace of its own. With network on, its only way
out is the proxy the agent runs (:mod:`tools_base.sandbox._proxy`): two TCP listeners on the
sandbox's *own* ``127.0.0.1`` (HTTP at :data:`HTTP_PORT`, SOCKS5 at :data:`SOCKS_PORT`; each
sandbox has its own namespace, so the fixed ports are always free). They are created inside that
namespace by the launcher, before the program starts, and handed to the agent over a Unix
socket (``SCM_RIGHTS``); a socket stays in the namespace it was made in, so the agent accepts
the program's connections there and makes the outbound ones from its own namespace, after its
policy said yes. No relay runs inside, and nothing of the host's network is reachable from it.

- ``namespaces`` backend: the launcher unshares the network namespace with the others, brings
  ``lo`` up (it holds every capability in its new user namespace) and makes the listeners.
- ``bubblewrap``: bwrap makes the namespaces, so the launcher starts it with ``--info-fd`` (the
  sandbox's pid) and ``--block-fd`` (the program waits); a forked helper of the launcher joins
  the sandbox's user and network namespaces (``setns``), makes the listeners, hands them over
  and releases the program.

Standard library only: the launcher runs as ``python -I -S`` (see :mod:`_launch`).
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import socket
import struct
from collections.abc import Sequence

HTTP_PORT = 3128
"""The HTTP proxy's port on the sandbox's own loopback."""
SOCKS_PORT = 1080
"""The SOCKS5 proxy's port on the sandbox's own loopback."""
PORTS = (HTTP_PORT, SOCKS_PORT)
LOOPBACK = "127.0.0.1"
PROXY_ENV = {
    **dict.fromkeys(
        ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"), f"http://{LOOPBACK}:{HTTP_PORT}"
    ),
    **dict.fromkeys(("ALL_PROXY", "all_proxy"), f"socks5h://{LOOPBACK}:{SOCKS_PORT}"),
    # The sandbox's loopback is its own (nothing of the host's is there): going direct to it
    # reaches only servers the program started itself.
    **dict.fromkeys(("NO_PROXY", "no_proxy"), "localhost,127.0.0.1,::1"),
}
"""What a program with network gets in its environment to find the proxy."""
HANDOFF_TAG = b"goondan-proxy-listeners"
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_INFO_LIMIT = 4096


class NetnsError(OSError):
    """The listeners could not be made; the message says which step and why."""


def bring_up_loopback() -> None:
    """Set ``lo`` up in this process's (new) network namespace."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sH22x", b"lo", flags | _IFF_UP))


def make_listeners() -> list[socket.socket]:
    """The proxy's listeners on this namespace's ``127.0.0.1`` (no ``SO_REUSEPORT``: nothing
    else may bind the same port and take the program's connections)."""
    made: list[socket.socket] = []
    try:
        for port in PORTS:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            made.append(sock)
            sock.bind((LOOPBACK, port))
            sock.listen(128)
    except BaseException:
        for sock in made:
            sock.close()
        raise
    return made


def connect_handoff(path: str) -> socket.socket:
    """The Unix socket the agent waits on for the listeners."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except BaseException:
        sock.close()
        raise
    return sock


def send_listeners(handoff: socket.socket, listeners: Sequence[socket.socket]) -> None:
    """Hand ``listeners`` to the agent, then drop this process's copies."""
    socket.send_fds(handoff, [HANDOFF_TAG], [s.fileno() for s in listeners])
    for sock in listeners:
        sock.close()


def _setns(libc: ctypes.CDLL, path: str, kind: int) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, kind) != 0:
            code = ctypes.get_errno()
            raise NetnsError(f"setns({path}): {os.strerror(code)}")
    finally:
        os.close(fd)


def enter_network_of(pid: int) -> None:
    """Join the network namespace of ``pid`` (a sandbox's), first its user namespace where
    this process lacks the capability over it (an unprivileged agent). Single-threaded only."""
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        _setns(libc, f"/proc/{pid}/ns/net", CLONE_NEWNET)
    except NetnsError:
        _setns(libc, f"/proc/{pid}/ns/user", CLONE_NEWUSER)
        _setns(libc, f"/proc/{pid}/ns/net", CLONE_NEWNET)


def _child_pid(fd: int) -> int:
    """bwrap's ``--info-fd`` JSON: the sandbox's pid."""
    data = b""
    while len(data) < _INFO_LIMIT:
        chunk = os.read(fd, _INFO_LIMIT)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError):
            continue
    raise NetnsError("bubblewrap did not say the sandbox's pid")


def _helper(handoff: socket.socket, info_r: int, block_w: int) -> None:
    """The forked helper of :func:`exec_bwrap` (never returns)."""
    try:
        enter_network_of(_child_pid(info_r))
        send_listeners(handoff, make_listeners())
        os.write(block_w, b"1")
    except BaseException as exc:
        # The program then runs with no way out at all: its namespace holds nothing.
        os.write(2, f"sandbox: the network proxy could not be set up: {exc}\n".encode())
        os._exit(1)
    os._exit(0)


def exec_bwrap(argv: Sequence[str], env: dict[str, str], handoff_path: str) -> None:
    """``exec`` bubblewrap (``argv``) holding the program until a helper has made and handed
    over the proxy's listeners in the sandbox's network namespace (never returns)."""
    handoff = connect_handoff(handoff_path)
    info_r, info_w = os.pipe()
    block_r, block_w = os.pipe()
    if os.fork() == 0:
        os.close(info_w)
        os.close(block_r)
        _helper(handoff, info_r, block_w)
    os.close(info_r)
    os.close(block_w)
    handoff.close()
    for fd in (info_w, block_r):
        os.set_inheritable(fd, True)
    run = [argv[0], "--info-fd", str(info_w), "--block-fd", str(block_r), *argv[1:]]
    os.execvpe(run[0], run, env)


def hand_over_from_here(handoff: socket.socket) -> None:
    """In the launcher, after it unshared its network namespace (``namespaces`` backend):
    ``lo`` up, the listeners made and handed to the agent over ``handoff`` (connected before
    the unshare, while the launcher still had the agent's view of the file system)."""
    try:
        bring_up_loopback()
        send_listeners(handoff, make_listeners())
    finally:
        handoff.close()
