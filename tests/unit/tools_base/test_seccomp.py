"""The seccomp filter's generator: a forked child installs the program it builds and makes the
calls itself, so what is checked is what the kernel does with the bytes, not the bytes."""

from __future__ import annotations

import ctypes
import errno
import json
import os
import signal
import struct
from collections.abc import Callable

import pytest

from tools_base.sandbox import _seccomp

pytestmark = [
    pytest.mark.timeout(30),
    pytest.mark.skipif(not _seccomp.supported(), reason="no filter for this architecture"),
]

NR = _seccomp.SYSCALLS[_seccomp.machine()] if _seccomp.supported() else {}
CLONE_NEWNS = 0x00020000
PTRACE_ATTACH = 16
SIGCHLD = 17


def _in_filtered_child(body: Callable[[], object], data: bytes | None = None) -> tuple[int, object]:
    """Run ``body`` in a forked child under the filter: ``(wait status, what it returned)``."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - reports through the pipe
        try:
            os.close(read_end)
            _seccomp.install(data)
            os.write(write_end, json.dumps(body()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    out = b""
    while chunk := os.read(read_end, 4096):
        out += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    return status, json.loads(out) if out else None


def _call(name: str, *args: int) -> int:
    """``0`` when the raw call succeeded (or failed for another reason), else its errno."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    ctypes.set_errno(0)
    result = libc.syscall(NR[name], *(ctypes.c_long(a) for a in args))
    return ctypes.get_errno() if result == -1 else 0


def test_the_denied_calls_fail_with_eperm() -> None:
    def body() -> dict[str, int]:
        return {
            "io_uring_setup": _call("io_uring_setup", 1, 0),
            "io_uring_enter": _call("io_uring_enter", -1, 0, 0, 0, 0, 0),
            "io_uring_register": _call("io_uring_register", -1, 0, 0, 0),
            "keyctl": _call("keyctl", 0, 0),
            "add_key": _call("add_key", 0, 0, 0, 0, 0),
            "request_key": _call("request_key", 0, 0, 0, 0),
            "bpf": _call("bpf", 0, 0, 0),
            "userfaultfd": _call("userfaultfd", 0),
            "perf_event_open": _call("perf_event_open", 0, 0, -1, -1, 0),
            "mount": _call("mount", 0, 0, 0, 0, 0),
            "umount2": _call("umount2", 0, 0),
            "pivot_root": _call("pivot_root", 0, 0),
            "open_tree": _call("open_tree", -100, 0, 0),
            "move_mount": _call("move_mount", -1, 0, -1, 0, 0),
            "fsopen": _call("fsopen", 0, 0),
            "fsmount": _call("fsmount", -1, 0, 0),
            "fsconfig": _call("fsconfig", -1, 0, 0, 0, 0),
            "mount_setattr": _call("mount_setattr", -1, 0, 0, 0, 0),
            "kexec_load": _call("kexec_load", 0, 0, 0, 0),
            "init_module": _call("init_module", 0, 0, 0),
            "finit_module": _call("finit_module", -1, 0, 0),
            "delete_module": _call("delete_module", 0, 0),
            "unshare(CLONE_NEWUSER)": _call("unshare", _seccomp.CLONE_NEWUSER),
            "clone(CLONE_NEWUSER)": _call("clone", _seccomp.CLONE_NEWUSER | SIGCHLD, 0, 0, 0, 0),
            "ptrace(ATTACH, parent)": _call("ptrace", PTRACE_ATTACH, os.getppid(), 0, 0),
        }

    status, seen = _in_filtered_child(body)
    assert os.WIFEXITED(status)
    assert isinstance(seen, dict)
    assert len(seen) == 25
    assert seen == dict.fromkeys(seen, errno.EPERM)


def test_clone3_says_enosys_so_libc_falls_back_to_clone() -> None:
    status, seen = _in_filtered_child(lambda: _call("clone3", 0, 0))
    assert os.WIFEXITED(status)
    assert seen == errno.ENOSYS


def test_ordinary_calls_still_work() -> None:
    def body() -> dict[str, object]:
        child = os.fork()  # clone without a new user namespace
        if child == 0:
            os._exit(7)
        _, status = os.waitpid(child, 0)
        with open("/proc/self/status") as own:
            mode = [line.split()[1] for line in own if line.startswith("Seccomp:")]
        return {
            "fork": os.waitstatus_to_exitcode(status),
            "pid": os.getpid() > 0,
            "traceme": _call("ptrace", 0, 0, 0, 0),  # PTRACE_TRACEME: a debugger may trace it
            "unshare(0)": _call("unshare", 0),
            "seccomp": mode,
        }

    status, seen = _in_filtered_child(body)
    assert os.WIFEXITED(status)
    assert seen == {"fork": 7, "pid": True, "traceme": 0, "unshare(0)": 0, "seccomp": ["2"]}


def test_another_architectures_numbering_kills() -> None:
    other = next(arch for arch in _seccomp.AUDIT_ARCH if arch != _seccomp.machine())
    # A filter checking for the other architecture reads every call of this one as foreign.
    status, seen = _in_filtered_child(lambda: "survived", _seccomp.program(other))
    assert os.WIFSIGNALED(status)
    assert os.WTERMSIG(status) == signal.SIGSYS
    assert seen is None


def test_the_program_is_whole_sock_filters_with_jumps_in_range() -> None:
    for arch in _seccomp.AUDIT_ARCH:
        data = _seccomp.program(arch)
        assert len(data) % 8 == 0
        instructions = [struct.unpack("=HBBI", data[i : i + 8]) for i in range(0, len(data), 8)]
        for at, (code, jt, jf, _) in enumerate(instructions):
            if code & 0x07 == 0x05:  # BPF_JMP: both targets inside the program
                assert at + 1 + max(jt, jf) < len(instructions)
        assert instructions[-1][0] == 0x06  # ends with a return
    with pytest.raises(ValueError, match="no seccomp filter"):
        _seccomp.program("mips")


def test_the_memfd_holds_the_program_at_offset_zero() -> None:
    fd = _seccomp.memfd()
    try:
        assert os.read(fd, 1 << 16) == _seccomp.program()
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)
