"""Process names: every process of a swarm says what it is in ``ps`` and ``top``.

Without this each shows as ``python`` (or the fork server's command line), and an operator
cannot tell which agent uses the CPU or which one to signal. The title (``ps``'s ``args``,
``/proc/PID/cmdline``) reads ``goondan agent coordinator``; the short name the kernel keeps
(``top``'s default, ``/proc/PID/comm``, 15 bytes) reads ``agent:coordinat``, which tells
agents apart where ``goondan agent c…`` would not.
"""

from __future__ import annotations

import structlog


def prepare() -> None:
    """Find the memory of this process's command line now, while the environment is the one it
    started with (it lies beside it); a forked child inherits what was found and can be named
    after it replaced its environment."""
    try:
        import setproctitle

        setproctitle.getproctitle()
    except Exception as exc:  # pragma: no cover - a platform without the means
        structlog.get_logger("goondan").debug("process names unavailable", reason=str(exc))


def name_process(role: str, name: str) -> None:
    """Call this process ``goondan ROLE NAME`` (``agent``, ``connector``, ``daemon``,
    ``node``); never fails: a process without a name still runs."""
    try:
        import setproctitle
    except ImportError:  # pragma: no cover - a dependency; the name is a convenience
        return
    try:
        setproctitle.setproctitle(f"goondan {role} {name}")
        setproctitle.setthreadtitle(f"{role}:{name}")
    except Exception as exc:  # pragma: no cover - a platform without the means
        structlog.get_logger("goondan").debug("process not named", reason=str(exc))
