"""No host root inside the sandbox: the user namespace of a program started by a root daemon.

A program always runs as :data:`SANDBOX_UID` of a user namespace of its own. Under a daemon of
an ordinary user that id maps onto the daemon's own (an unprivileged process can map nothing
else). Under a root daemon, mapping it onto root would hand the program host root's files and
``/proc/sys``; instead it maps onto an unprivileged host id (:func:`host_ids`): root's first
subordinate id from ``/etc/subuid``/``/etc/subgid`` where there is one, else ``nobody``
(65534, mapped even in most containers). Root may write another process's ``uid_map``, so a
helper process makes the namespace and the launcher writes its map (:func:`make`), as
``newuidmap`` does.

The workspace stays root's on disk (mode 0700, files 0600), yet the program must read and write
it and the agent must read what it wrote. It is bound as an **idmapped mount**: disk id 0
appears as the host id, so the sandbox sees it as its own, and what the program creates is
written to disk as root's (:func:`idmapped_tree`). Where the workspace's file system cannot be
idmapped, the map falls back to host root as before (the other protections still hold:
``/proc/sys`` read-only, the seccomp filter, masked ``/etc`` files); ``probe`` says which.

Files under ``/etc`` that root can read but others cannot (``/etc/shadow``, host keys,
``sudoers``...) are masked when the daemon is root (:func:`private_etc`).

Standard library only: the launcher imports it under ``python -I -S``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import stat
from collections.abc import Iterable, Mapping, Sequence

SANDBOX_UID = 1000
"""The user (and group) a sandboxed program runs as inside its user namespace."""
NOBODY = 65534
"""The host id used under a root daemon where root has no subordinate ids."""
MASK_LIMIT = 256
"""At most this many ``/etc`` entries are masked (each is a mount)."""

CLONE_NEWUSER = 0x10000000
CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 0x40000
_AT_FDCWD = -100
_AT_EMPTY_PATH = 0x1000
_OPEN_TREE_CLONE = 1
_MOUNT_ATTR_IDMAP = 0x00100000
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOVE_MOUNT_T_EMPTY_PATH = 0x40
_OPEN_TREE = 428  # the same number on x86_64 and aarch64 (new calls share one numbering)
_MOVE_MOUNT = 429
_MOUNT_SETATTR = 442
_PR_SET_KEEPCAPS = 8


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> OSError:
    code = ctypes.get_errno()
    return OSError(code, f"{what}: {os.strerror(code)}")


def _subordinate(path: str, names: Iterable[str]) -> int | None:
    """The first id of the first range ``path`` gives any of ``names``."""
    wanted = set(names)
    with contextlib.suppress(OSError, ValueError), open(path) as table:
        for line in table:
            fields = line.strip().split(":")
            if len(fields) == 3 and fields[0] in wanted and int(fields[2]) >= 1:
                return int(fields[1])
    return None


def host_ids() -> tuple[int, int]:
    """``(uid, gid)`` on the host that the program's user maps onto under a root daemon."""
    uid = _subordinate("/etc/subuid", ("root", "0"))
    gid = _subordinate("/etc/subgid", ("root", "0"))
    return (NOBODY if uid is None else uid), (NOBODY if gid is None else gid)


def make(uid_map: str, gid_map: str) -> int:
    """A new user namespace with these maps, as a descriptor (``/proc/PID/ns/user``).

    A child makes it with ``unshare`` and waits; this process, privileged in its own namespace,
    writes the child's maps, then keeps the namespace by its descriptor and lets the child go.
    Only from a single-threaded process (it forks).
    """
    libc = _libc()
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports only through its pipes
        os.close(ready_r)
        os.close(go_w)
        made = libc.unshare(CLONE_NEWUSER) == 0
        os.write(ready_w, b"1" if made else b"0")
        os.read(go_r, 1)
        os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError(errno.EPERM, "unshare(CLONE_NEWUSER) failed in the helper")
        return map_helper(child, uid_map, gid_map)
    finally:
        os.close(ready_r)
        os.close(go_w)
        os.waitpid(child, 0)


def map_helper(pid: int, uid_map: str, gid_map: str) -> int:
    """Write the maps of process ``pid``'s new user namespace; that namespace's descriptor."""
    proc = f"/proc/{pid}"
    for name, text in (("setgroups", "deny"), ("uid_map", uid_map), ("gid_map", gid_map)):
        fd = os.open(f"{proc}/{name}", os.O_WRONLY)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
    return os.open(f"{proc}/ns/user", os.O_RDONLY | os.O_CLOEXEC)


def sandbox_userns(uid: int, gid: int) -> int:
    """The namespace the program runs in: :data:`SANDBOX_UID` is host ``uid``/``gid``."""
    return make(f"{SANDBOX_UID} {uid} 1", f"{SANDBOX_UID} {gid} 1")


def idmap_userns(uid: int, gid: int) -> int:
    """The namespace an idmapped mount reads ids through: disk id 0 is host ``uid``/``gid``."""
    return make(f"0 {uid} 1", f"0 {gid} 1")


def private_mounts() -> None:
    """A mount namespace of this process's own, nothing shared back (root only)."""
    libc = _libc()
    if libc.unshare(CLONE_NEWNS) != 0:
        raise _fail("unshare(CLONE_NEWNS)")
    if libc.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None) != 0:
        raise _fail("mount --make-rprivate /")


def open_tree(source: str | int) -> int:
    """A detached copy of the mount at ``source``: a path, or an open directory (a workspace
    pinned by descriptor is copied from the descriptor, never looked up again by name)."""
    libc = _libc()
    if isinstance(source, int):
        where, name, flags = source, b"", _AT_EMPTY_PATH
    else:
        where, name, flags = _AT_FDCWD, os.fsencode(source), 0
    tree = libc.syscall(_OPEN_TREE, where, name, _OPEN_TREE_CLONE | os.O_CLOEXEC | flags)
    if tree < 0:
        raise _fail(f"open_tree({source})")
    return int(tree)


def idmapped_tree(source: str | int, userns_fd: int) -> int:
    """A detached copy of the mount at ``source`` whose ids read through ``userns_fd``."""
    tree = open_tree(source)
    attr = _MountAttr(_MOUNT_ATTR_IDMAP, 0, 0, userns_fd)
    if _libc().syscall(_MOUNT_SETATTR, tree, b"", _AT_EMPTY_PATH, ctypes.byref(attr),
                       ctypes.sizeof(attr)) != 0:  # fmt: skip
        failure = _fail(f"idmapped mount of {source}")
        os.close(tree)
        raise failure
    return tree


def attach(tree: int, path: str) -> None:
    """Mount the detached ``tree`` on ``path`` (in this process's mount namespace)."""
    libc = _libc()
    if libc.syscall(_MOVE_MOUNT, tree, b"", _AT_FDCWD, os.fsencode(path),
                    _MOVE_MOUNT_F_EMPTY_PATH) != 0:  # fmt: skip
        raise _fail(f"move_mount onto {path}")


def attach_over(tree: int, directory: int) -> None:
    """Mount the detached ``tree`` over the open ``directory`` (no path looked up)."""
    if _libc().syscall(_MOVE_MOUNT, tree, b"", directory, b"",
                       _MOVE_MOUNT_F_EMPTY_PATH | _MOVE_MOUNT_T_EMPTY_PATH) != 0:  # fmt: skip
        raise _fail("move_mount onto the pinned workdir")


def idmap_over(
    paths: Iterable[str], uid: int, gid: int, pinned: Mapping[str, int] | None = None
) -> str | None:
    """In a private mount namespace made by :func:`private_mounts`: each of ``paths`` covered
    by an idmapped copy of itself, disk id 0 read as host ``uid``/``gid``. A path ``pinned``
    names (the workdir, as an open directory) is copied from and mounted over its descriptor,
    never looked up, and becomes the working directory: the copy's root. ``None`` when done,
    else why not (nothing is left half done that matters: the caller then maps onto root)."""
    pinned = pinned or {}
    try:
        userns = idmap_userns(uid, gid)
    except OSError as exc:
        return str(exc)
    trees: list[tuple[int, str]] = []
    try:
        for path in paths:
            trees.append((idmapped_tree(pinned.get(path, path), userns), path))
        for tree, path in trees:
            if path in pinned:
                attach_over(tree, pinned[path])
                os.fchdir(tree)
            else:
                attach(tree, path)
    except OSError as exc:
        return str(exc)
    finally:
        os.close(userns)
        for tree, _ in trees:
            os.close(tree)
    return None


STAGES = ("/dev/shm", "/mnt", "/tmp")
"""Where :func:`stage` mounts its tmpfs (in a private mount namespace; the first that exists)."""


def _clone(path: str | int, userns_fd: int | None) -> int:
    return open_tree(path) if userns_fd is None else idmapped_tree(path, userns_fd)


def clone_sources(
    writable: Iterable[str],
    read_only: Iterable[str],
    userns_fd: int | None,
    pinned: Mapping[str, int] | None = None,
) -> tuple[dict[str, int], bool]:
    """Detached copies of the paths a sandbox binds: the writable ones idmapped through
    ``userns_fd`` where every one of them can be (else none is), the read-only ones as they
    are; a path ``pinned`` names is copied from its open directory, never looked up. Returns
    ``{path: tree descriptor}`` and whether the writable ones are idmapped."""
    writable = list(writable)
    pinned = pinned or {}
    trees: dict[str, int] = {}
    idmapped = userns_fd is not None
    try:
        if userns_fd is not None:
            try:
                for path in writable:
                    trees[path] = _clone(pinned.get(path, path), userns_fd)
            except OSError:
                idmapped = False
                for tree in trees.values():
                    os.close(tree)
                trees = {}
        if not idmapped:
            trees = {path: _clone(pinned.get(path, path), None) for path in writable}
        for path in read_only:
            if os.path.exists(path) and path not in trees:
                with contextlib.suppress(OSError):
                    trees[path] = _clone(path, None)
    except BaseException:
        for tree in trees.values():
            os.close(tree)
        raise
    return trees, idmapped


def stage_dir() -> str:
    """Where :func:`mount_stage` mounts its tmpfs."""
    return next(p for p in STAGES if os.path.isdir(p))


def staged_paths(trees: dict[str, int]) -> dict[str, str]:
    """``{path: where mount_stage attaches its copy}``."""
    where = stage_dir()
    return {path: f"{where}/{number}" for number, path in enumerate(trees)}


def mount_stage(trees: dict[str, int], kinds: dict[str, bool]) -> None:
    """In a private mount namespace made by :func:`private_mounts`: a fresh world-searchable
    tmpfs holding ``trees`` at :func:`staged_paths`, so a process that may not search the
    directories above them (a workspace under ``/root``) can still bind them. ``kinds`` says
    which paths are directories."""
    where = stage_dir()
    libc = _libc()
    if libc.mount(b"tmpfs", os.fsencode(where), b"tmpfs", ctypes.c_ulong(0x2 | 0x4),
                  b"mode=0755,size=65536") != 0:  # fmt: skip
        raise _fail(f"mount tmpfs on {where}")
    for path, target in staged_paths(trees).items():
        if kinds[path]:
            os.mkdir(target)
        else:
            os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o600))
        attach(trees[path], target)


def stage(
    writable: Iterable[str],
    read_only: Iterable[str],
    uid: int,
    gid: int,
    pinned: Mapping[str, int] | None = None,
) -> tuple[dict[str, str], bool]:
    """:func:`clone_sources` then :func:`mount_stage`, from a single-threaded process.
    Returns ``{path: staged path}`` and whether the writable paths are idmapped."""
    pinned = pinned or {}
    try:
        userns: int | None = idmap_userns(uid, gid)
    except OSError:
        userns = None
    try:
        trees, idmapped = clone_sources(writable, read_only, userns, pinned)
    finally:
        if userns is not None:
            os.close(userns)
    try:
        mount_stage(trees, {path: path in pinned or os.path.isdir(path) for path in trees})
        return staged_paths(trees), idmapped
    finally:
        for tree in trees.values():
            os.close(tree)


def private_etc(root: str = "/etc", limit: int = MASK_LIMIT) -> list[str]:
    """Entries under ``root`` only their owner or group may read: files not world-readable,
    directories not world-searchable (not descended into). Symlinks are left alone (they lead
    to what is masked or to a path outside the sandbox)."""
    found: list[str] = []
    stack = [root]
    while stack and len(found) < limit:
        directory = stack.pop()
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            continue
        for entry in entries:
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if mode & stat.S_IXOTH and mode & stat.S_IROTH:
                    stack.append(entry.path)
                else:
                    found.append(entry.path)
            elif stat.S_ISREG(mode) and not mode & stat.S_IROTH:
                found.append(entry.path)
    return sorted(found[:limit])


def become_sandbox_user() -> None:
    """In the program's process, before ``exec``: be :data:`SANDBOX_UID` (a no-op where that is
    already who this is; under a root daemon the launcher is uid 0 of the namespace until
    here, with no host privilege)."""
    if os.getuid() != SANDBOX_UID or os.getgid() != SANDBOX_UID:
        os.setresgid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)
        os.setresuid(SANDBOX_UID, SANDBOX_UID, SANDBOX_UID)


def set_fs_ids(uid: int) -> None:
    """Create files as ``uid`` of this namespace (lookups already made keep their access)."""
    libc = _libc()
    libc.setfsgid(uid)
    libc.setfsuid(uid)


def rebind(argv: Sequence[str], staged: Mapping[str, str]) -> list[str]:
    """bubblewrap's ``argv`` with each bind of a staged path made a bind of its copy: a bind
    by path (``--bind``, ``--ro-bind-try``) or by descriptor (``--bind-fd N DEST``, the pinned
    workdir, whose copy was made from that descriptor)."""
    out = list(argv)
    for at in range(len(out) - 2):
        if out[at] in ("--bind", "--ro-bind-try") and out[at + 1] in staged:
            out[at + 1] = staged[out[at + 1]]
        elif out[at] == "--bind-fd" and out[at + 2] in staged:
            out[at : at + 2] = ["--bind", staged[out[at + 2]]]
    return out
