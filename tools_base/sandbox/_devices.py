"""The sandbox's ``/dev`` under bubblewrap: the harmless devices, read-only, and ``/dev/shm``
on the private ``/tmp``.

bubblewrap's own ``--dev`` makes ``/dev`` a writable tmpfs of half the machine's memory, with
``/dev/shm`` a directory on it: a program could park gigabytes there, outside ``tmpMiB`` and
``RLIMIT_AS`` (tmpfs pages belong to no process). So ``/dev`` is built here from the same
pieces, small and remounted read-only once made, and ``/dev/shm`` is a symlink to
:data:`SHM_DIR`, a directory on the call's private ``/tmp``: POSIX shared memory
(``shm_open``, Python's ``multiprocessing.shared_memory``, semaphores) and ``/tmp`` share the
one tmpfs of ``tmpMiB``. The ``namespaces`` backend (:mod:`tools_base.sandbox._launch`) builds
the same layout.
"""

from __future__ import annotations

from tools_base.sandbox._launch import DEVICES, SHM_DIR

DEV_TMPFS_BYTES = 65536
"""The size of the tmpfs that holds ``/dev``'s nodes and links (read-only once made)."""
_STDIO = (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
          ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2"))  # fmt: skip


def bwrap_dev() -> list[str]:
    """bubblewrap's arguments for ``/dev`` (in place of ``--dev /dev``), before ``/tmp``."""
    args = ["--perms", "0755", "--size", str(DEV_TMPFS_BYTES), "--tmpfs", "/dev"]
    for name in DEVICES:
        args += ["--dev-bind-try", f"/dev/{name}", f"/dev/{name}"]
    for name, target in _STDIO:
        args += ["--symlink", target, f"/dev/{name}"]
    return args


def bwrap_shm() -> list[str]:
    """bubblewrap's arguments for ``/dev/shm``, right after the private ``/tmp`` is mounted;
    ``/dev`` is read-only from then on."""
    return [
        "--perms", "1777", "--dir", SHM_DIR, "--symlink", SHM_DIR, "/dev/shm",
        "--remount-ro", "/dev",
    ]  # fmt: skip
