"""The seccomp filter every sandboxed program runs under, on both backends.

The namespaces already take most of the machine out of reach; what is left is the kernel
itself. These system calls are the ones a program in a sandbox has no use for and that have
been the way in for kernel bugs, or that would let it build a sandbox of its own inside ours:

- ``io_uring_*``, ``bpf``, ``userfaultfd``, ``perf_event_open``, ``keyctl``/``add_key``/
  ``request_key``: large attack surfaces with a long record of privilege escalations;
- ``ptrace`` of anything but being traced by its parent (``PTRACE_TRACEME``), so a debugger
  in the sandbox can still be traced but nothing attaches to a process it did not start;
- ``mount`` and the new mount API, ``pivot_root``, ``kexec_*``, module loading;
- a new user namespace (``unshare``/``clone`` with ``CLONE_NEWUSER``): one level, ours, is
  enough, and a nested one hands the program every capability inside it. ``clone3`` passes
  its flags in memory a filter cannot read, so it fails with ``ENOSYS`` and the C library falls
  back to ``clone``.

A denied call fails with ``EPERM``. A call made with another architecture's numbering (32-bit
x86 or x32 on x86_64) kills the process: a filter for one numbering must not be read with
another's.

The program is classic BPF built here (:func:`program`), installed by the ``namespaces``
launcher with ``prctl(PR_SET_SECCOMP)`` just before ``exec`` (:func:`install`) and handed to
bubblewrap as raw ``sock_filter`` bytes on a descriptor (:func:`memfd`). Standard library only:
the launcher imports it under ``python -I -S``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

# struct seccomp_data: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64 each).
_NR = 0
_ARCH = 4
_ARG0_LOW = 16  # the low 32 bits of args[0] (both architectures are little-endian)

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

CLONE_NEWUSER = 0x10000000
PTRACE_TRACEME = 0
X32_SYSCALL_BIT = 0x40000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
"""The ``AUDIT_ARCH_*`` value of each machine the filter knows."""

# Numbers differ between the two; the calls added since 5.1 share one numbering.
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "ptrace": 101, "pivot_root": 155, "mount": 165, "umount2": 166, "init_module": 175,
        "delete_module": 176, "kexec_load": 246, "add_key": 248, "request_key": 249,
        "keyctl": 250, "unshare": 272, "perf_event_open": 298, "finit_module": 313,
        "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323, "clone": 56,
    },
    "aarch64": {
        "ptrace": 117, "pivot_root": 41, "mount": 40, "umount2": 39, "init_module": 105,
        "delete_module": 106, "kexec_load": 104, "add_key": 217, "request_key": 218,
        "keyctl": 219, "unshare": 97, "perf_event_open": 241, "finit_module": 273,
        "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282, "clone": 220,
    },
}  # fmt: skip
_COMMON = {
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
    "clone3": 435, "mount_setattr": 442, "open_tree_attr": 467,
}  # fmt: skip
for _table in SYSCALLS.values():
    _table.update(_COMMON)

DENIED = (
    "io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key",
    "request_key", "bpf", "userfaultfd", "perf_event_open", "mount", "umount2", "pivot_root",
    "move_mount", "open_tree", "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick",
    "mount_setattr", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module",
)  # fmt: skip
"""Calls that always fail with ``EPERM``."""


def machine() -> str:
    """This machine's name as :data:`AUDIT_ARCH` knows it (``arm64`` is ``aarch64``)."""
    name = os.uname().machine
    return "aarch64" if name == "arm64" else name


def supported(arch: str | None = None) -> bool:
    """Whether the filter knows ``arch`` (default: this machine)."""
    return (arch or machine()) in AUDIT_ARCH


def program(arch: str | None = None) -> bytes:
    """The filter for ``arch`` (default: this machine) as raw ``struct sock_filter`` array."""
    arch = arch or machine()
    if arch not in AUDIT_ARCH:
        raise ValueError(f"no seccomp filter for {arch}")
    nr = SYSCALLS[arch]
    # (code, jump-if-true label, jump-if-false label, k); labels resolve to relative offsets.
    code: list[tuple[int, str | None, str | None, int]] = [
        (_LD_W_ABS, None, None, _ARCH),
        (_JEQ, None, "kill", AUDIT_ARCH[arch]),
        (_LD_W_ABS, None, None, _NR),
    ]
    if arch == "x86_64":
        code.append((_JGE, "kill", None, X32_SYSCALL_BIT))
    code += [(_JEQ, "deny", None, nr[name]) for name in DENIED]
    code += [
        (_JEQ, "enosys", None, nr["clone3"]),
        (_JEQ, "flags", None, nr["clone"]),
        (_JEQ, "flags", None, nr["unshare"]),
        (_JEQ, "ptrace", None, nr["ptrace"]),
        (_RET, None, None, RET_ALLOW),
    ]
    labels: dict[str, int] = {}

    def label(name: str) -> None:
        labels[name] = len(code)

    label("flags")
    code += [(_LD_W_ABS, None, None, _ARG0_LOW), (_JSET, "deny", "allow", CLONE_NEWUSER)]
    label("ptrace")
    code += [(_LD_W_ABS, None, None, _ARG0_LOW), (_JEQ, "allow", "deny", PTRACE_TRACEME)]
    label("allow")
    code.append((_RET, None, None, RET_ALLOW))
    label("deny")
    code.append((_RET, None, None, RET_ERRNO | errno.EPERM))
    label("enosys")
    code.append((_RET, None, None, RET_ERRNO | errno.ENOSYS))
    label("kill")
    code.append((_RET, None, None, RET_KILL_PROCESS))

    out = bytearray()
    for at, (op, true, false, k) in enumerate(code):
        jt = labels[true] - at - 1 if true else 0
        jf = labels[false] - at - 1 if false else 0
        if not (0 <= jt <= 255 and 0 <= jf <= 255):
            raise ValueError("seccomp filter: a jump is out of range")
        out += struct.pack("=HBBI", op, jt, jf, k)
    return bytes(out)


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(filter_bytes: bytes | None = None) -> None:
    """Set ``NO_NEW_PRIVS`` and install the filter on this thread (the caller ``exec``\\ s
    right after; a forked child is single-threaded). Raises ``OSError`` when the kernel
    refuses."""
    data = filter_bytes if filter_bytes is not None else program()
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(data, len(data))
    fprog = _SockFprog(len(data) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    for args in (
        (PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0),
        (PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(fprog), 0, 0),
    ):
        if libc.prctl(*(ctypes.c_ulong(a) for a in args)) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"prctl({args[0]}): {os.strerror(code)}")


def memfd(filter_bytes: bytes | None = None) -> int:
    """A descriptor (close-on-exec, at offset 0) holding the filter, for ``bwrap --seccomp``."""
    data = filter_bytes if filter_bytes is not None else program()
    fd = os.memfd_create("goondan-seccomp", os.MFD_CLOEXEC)
    try:
        os.write(fd, data)
        os.lseek(fd, 0, os.SEEK_SET)
    except BaseException:
        os.close(fd)
        raise
    return fd
