"""What a sandbox may do: the mode a swarm picks, and one Tool's policy and limits (its
``sandbox:`` config), re-exported by :mod:`tools_base.sandbox`."""

from __future__ import annotations

import enum
import os
from dataclasses import dataclass, field

from tools_base._context import ToolConfigError
from tools_base.sandbox._netpolicy import NetworkRules, parse_network
from tools_base.sandbox._quota import DEFAULT_DISK_MIB


class SandboxMode(enum.StrEnum):
    """``Swarm.spec.policy.sandbox``: which sandbox tool programs run in."""

    AUTO = "auto"
    """bubblewrap where it runs, else the kernel's namespaces, else refuse."""
    BWRAP = "bwrap"
    """bubblewrap only."""
    NAMESPACES = "namespaces"
    """The kernel's namespaces directly (no bubblewrap)."""
    OFF = "off"
    """No sandbox: programs run as the agent, with its view of the machine (limits still hold)."""


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Per-call limits; ``None`` leaves one unbounded."""

    cpu_seconds: int | None = 300
    """CPU time of each process (``RLIMIT_CPU``): SIGXCPU, then SIGKILL a second later."""
    memory_mib: int | None = 4096
    """Address space of each process (``RLIMIT_AS``)."""
    processes: int | None = 256
    """Processes and threads at once, everything the program starts included."""
    file_size_mib: int | None = 1024
    """The largest file a process may write (``RLIMIT_FSIZE``; SIGXFSZ / EFBIG past it)."""
    tmp_mib: int = 256
    """Size of the private ``/tmp`` (memory-backed), ``/dev/shm`` included."""
    disk_mib: int | None = DEFAULT_DISK_MIB
    """The workspace's disk quota (measured: see :mod:`tools_base.sandbox._quota`)."""


@dataclass(frozen=True, slots=True)
class SandboxPolicy:
    """What one Tool's programs may do, from its config (``sandbox:`` key)."""

    network: bool = False
    """Whether the program may reach the public internet, through the proxy only."""
    network_rules: NetworkRules = field(default_factory=NetworkRules)
    """Host-name rules of ``sandbox.network``'s object form (``allow``, ``deny``, ``hosts``)."""
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    read_only: tuple[str, ...] = ()
    """Further host paths visible read-only (absolute)."""
    read_write: tuple[str, ...] = ()
    """Further host paths visible read-write (absolute)."""

    @classmethod
    def from_config(
        cls, tool: str, raw: object, *, network: bool = False, cpu: bool = True
    ) -> SandboxPolicy:
        """Parse a Tool's ``sandbox`` config object; a mistake is a :class:`ToolConfigError`
        naming the key. ``network`` is the Tool's default; ``cpu=False`` drops the CPU limit
        (a long-lived server accumulates CPU time over its whole life)."""
        base = cls(network=network, limits=SandboxLimits(cpu_seconds=300 if cpu else None))
        if raw is None:
            return base
        if not isinstance(raw, dict):
            raise ToolConfigError(f"{tool} config 'sandbox' must be an object, got {raw!r}")
        known = {
            "network", "cpuSeconds", "memoryMiB", "processes", "fileSizeMiB", "tmpMiB",
            "readOnlyPaths", "readWritePaths", "diskMiB",
        }  # fmt: skip
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ToolConfigError(
                f"{tool} config 'sandbox' has unknown key(s) {', '.join(map(repr, unknown))}; "
                f"known keys: {', '.join(sorted(known))}"
            )

        def limit(key: str, default: int | None) -> int | None:
            value = raw.get(key, default)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ToolConfigError(
                    f"{tool} config 'sandbox.{key}' must be an integer >= 1 or null, got {value!r}"
                )
            return value

        def paths(key: str) -> tuple[str, ...]:
            value = raw.get(key, [])
            if not isinstance(value, list) or not all(
                isinstance(p, str) and os.path.isabs(p) for p in value
            ):
                raise ToolConfigError(
                    f"{tool} config 'sandbox.{key}' must be a list of absolute paths"
                )
            return tuple(os.path.normpath(p) for p in value)

        flag, rules = parse_network(tool, raw.get("network", network))
        d = base.limits
        tmp = limit("tmpMiB", d.tmp_mib)
        return cls(
            network=flag,
            network_rules=rules,
            limits=SandboxLimits(
                cpu_seconds=limit("cpuSeconds", d.cpu_seconds),
                memory_mib=limit("memoryMiB", d.memory_mib),
                processes=limit("processes", d.processes),
                file_size_mib=limit("fileSizeMiB", d.file_size_mib),
                tmp_mib=tmp if tmp is not None else d.tmp_mib,
                disk_mib=limit("diskMiB", d.disk_mib),
            ),
            read_only=paths("readOnlyPaths"),
            read_write=paths("readWritePaths"),
        )
