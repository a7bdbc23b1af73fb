"""``bash``: run a shell command or a script file in the instance workdir.

Exports (required parameters in **bold**):

``exec``: **command**, ``cwd`` (directory relative to the workdir; default the workdir),
    ``timeoutMs`` (default 30000; 0 or less means no limit of its own), ``env`` (object of
    string/number/boolean values merged over the command's environment, see below).
    Runs ``/bin/sh -lc <command>``.
    → ``{command, cwd, durationMs, stdout, stderr, exitCode, signal, timedOut, truncated,
    stdoutTruncated, stderrTruncated}``.
``script``: **path** (script file relative to the workdir), ``args`` (array of strings),
    ``shell`` (default ``/bin/bash``), ``timeoutMs``, ``env``.
    Runs ``<shell> <path> ...args`` in the workdir.
    → ``{path, shell, args, durationMs, stdout, stderr, exitCode, signal, timedOut, truncated,
    stdoutTruncated, stderrTruncated}``.

Behaviour:

* stdin is ``/dev/null``. The command runs in a new session, so it and everything it starts
  form one process group.
* A non-zero exit is data, not an error: read ``exitCode``. ``signal`` names the signal that
  ended the process (``"SIGTERM"``) or is null; ``exitCode`` is -1 then.
* On timeout the whole process group gets SIGTERM, then SIGKILL 100 ms later;
  ``timedOut`` is true and ``exitCode`` -1. If the executor cancels the call (its own
  ``timeoutSeconds``), the group is killed at once.
* stdout and stderr are read as they arrive and each keeps at most config
  ``maxOutputBytes``; the rest is read and dropped so the command never blocks on a full
  pipe. ``stdoutTruncated``/``stderrTruncated`` say which stream was cut and ``truncated``
  is their OR. Output is decoded as UTF-8, invalid bytes replaced.
* When the command exits, output still buffered is collected for up to 200 ms; then the
  command's whole process group is killed, so background jobs (``cmd &``, ``nohup cmd &``)
  end with the call. A program that left the group (``setsid``) is ended when its agent stops
  or dies (see the agent's process scope).
* The command does not inherit the agent's environment, which holds provider keys and other
  secrets: it gets only ``PATH``, ``HOME``, ``LANG``, ``LC_*``, ``TZ`` and ``TMPDIR`` from it,
  plus the names config ``passEnv`` lists, plus the call's ``env``.
* The command runs in the tool sandbox (:mod:`tools_base.sandbox`): its own user, PID, mount,
  IPC and UTS namespaces, the workdir read-write (and its ``HOME``), the system's directories
  read-only, a private ``/tmp``; a network namespace of its own: no network unless config
  ``sandbox.network``, and then only through the call's proxy (``HTTP_PROXY``, ``HTTPS_PROXY``,
  ``ALL_PROXY`` name it), which reaches public addresses only; per-call limits.
  A pid it prints is its own PID namespace's. bubblewrap reports a program's death by signal N
  as exit status 128 + N, which is read back as that signal.
* The workdir has a disk quota (config ``sandbox.diskMiB``, see
  :mod:`tools_base.sandbox._quota`), measured before, while and after the command runs: past
  it, or with its disk down to its last 64 MiB, the command's group is ended as on timeout and
  the call fails with ``E_WORKSPACE_QUOTA``.
* The workdir is the directory the instance was given, opened once: the sandbox binds that
  descriptor, not a path, and each call first checks the workdir's path still names it (a
  workdir since replaced by a symlink or another directory, or moved, is refused with
  ``E_SPAWN_CWD_REFUSED``).
* ``cwd`` and ``path`` must stay inside the workdir (symlinks resolved) unless config
  ``allowOutsideWorkdir`` is true; such a directory (or the script's) is then made visible in
  the sandbox too.

Config (``configure``):

``allowOutsideWorkdir`` (bool, default false) accept ``cwd``/``path`` outside the workdir.
``maxOutputBytes`` (int, default 1048576) bytes kept per stream.
``passEnv`` (list of names, default none) more variables of the agent's environment the
    command gets; a name ending in ``*`` passes every variable with that prefix (``AWS_*``).
``sandbox`` (object) ``network`` (``off`` (default), ``on``, or ``{allow, deny, hosts}``; see
    :mod:`tools_base.sandbox._netpolicy`), ``cpuSeconds``, ``memoryMiB``,
    ``processes``, ``fileSizeMiB``, ``tmpMiB`` (``/tmp`` and ``/dev/shm`` together),
    ``diskMiB`` (the workspace's disk quota, default 1024) (limits; ``null`` lifts one),
    ``readOnlyPaths``/``readWritePaths`` (absolute host paths made visible): see
    :class:`tools_base.sandbox.SandboxPolicy`.

Error codes: ``E_BASH_PATH_OUTSIDE_WORKDIR``, ``E_BASH_CWD_NOT_FOUND``,
``E_BASH_SCRIPT_NOT_FOUND``, ``E_BASH_SPAWN_FAILED`` (shell missing or not executable),
``E_SANDBOX_UNAVAILABLE`` (no sandbox can be made here), ``E_WORKSPACE_QUOTA`` (the
workspace passed ``sandbox.diskMiB``, or its disk fell below 64 MiB free: the command was
ended, or not started), ``E_SPAWN_CWD_REFUSED`` (the workdir was swapped),
``E_TOOL_INVALID_ARGS``.

Handlers are coroutines: they run on the agent's event loop and never block it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace

from goondan.errors import ToolCode
from tools_base import JsonObject, JsonValue, ToolContext, ToolError, ToolHandler, sandbox
from tools_base.sandbox import SandboxPolicy
from tools_base.sandbox._quota import Guard
from tools_base.tools._common import (
    ConfigReader,
    invalid_arg,
    optional_number,
    optional_object,
    optional_string,
    optional_string_list,
    primitive_to_string,
    require_string,
)
from tools_base.tools._sandbox import Workspace, acquire_workdir

DEFAULT_TIMEOUT_MS = 30_000
DEFAULT_MAX_OUTPUT_BYTES = 1024 * 1024
KILL_GRACE_SECONDS = 0.1
"""Between SIGTERM and SIGKILL on timeout."""
DRAIN_GRACE_SECONDS = 0.2
"""How long output is still collected after the command exits."""
REAP_GRACE_SECONDS = 1.0
"""How long a cancelled call waits for the killed process to be reaped."""
QUOTA_OUTPUT_CHARS = 300
"""How much of its stderr a call ended by the disk quota reports."""
OUTSIDE_WORKDIR = ToolCode.E_BASH_PATH_OUTSIDE_WORKDIR
_SIGNALS = frozenset(int(s) for s in signal.valid_signals())


INHERITED_ENV = ("PATH", "HOME", "LANG", "LC_*", "TZ", "TMPDIR", "GOONDAN_AGENT_SCOPE")
"""What a command gets of the agent's environment without config: nothing secret."""


@dataclass(frozen=True, slots=True)
class BashConfig:
    """Parsed Tool config."""

    allow_outside_workdir: bool = False
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES
    pass_env: tuple[str, ...] = ()
    """Names (or ``PREFIX*`` patterns) of further variables passed through."""
    sandbox: SandboxPolicy = field(default_factory=SandboxPolicy)
    """What the command may do: network, limits, further paths (config ``sandbox``)."""


@dataclass(frozen=True, slots=True)
class RunResult:
    """What one process run produced."""

    stdout: str
    stderr: str
    stdout_truncated: bool
    stderr_truncated: bool
    exit_code: int
    signal: str | None
    timed_out: bool
    duration_ms: int

    def to_json(self) -> JsonObject:
        """The output fields shared by ``exec`` and ``script``."""
        return {
            "durationMs": self.duration_ms,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "exitCode": self.exit_code,
            "signal": self.signal,
            "timedOut": self.timed_out,
            "truncated": self.stdout_truncated or self.stderr_truncated,
            "stdoutTruncated": self.stdout_truncated,
            "stderrTruncated": self.stderr_truncated,
        }


class _Capture(asyncio.Protocol):
    """Read end of one output pipe: keeps the first ``limit`` bytes and drops the rest."""

    def __init__(self, limit: int, closed: asyncio.Future[None]) -> None:
        self._limit = limit
        self._data = bytearray()
        self.truncated = False
        self.closed = closed
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        room = self._limit - len(self._data)
        if len(data) > room:
            self.truncated = True
        if room > 0:
            self._data += data[:room]

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def text(self) -> str:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        return decoder.decode(bytes(self._data), final=not self.truncated)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _signal_members(pgid: int, sig: signal.Signals) -> None:
    """``sig`` to every process of group ``pgid`` but its leader.

    bubblewrap leads the group and, unlike the program, dies of SIGTERM at once, which ends its
    whole sandbox with SIGKILL: the program gets the SIGTERM itself, and its grace period.
    """
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == pgid:
                continue
            with contextlib.suppress(OSError, ValueError, IndexError):
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
                if int(fields[2]) == pgid:
                    os.kill(int(entry.name), sig)


async def _terminate_group(proc: asyncio.subprocess.Process, backend: sandbox.SandboxMode) -> None:
    """SIGTERM to the group, SIGKILL to it 100 ms later, then reap the leader."""
    if backend is sandbox.SandboxMode.BWRAP:
        _signal_members(proc.pid, signal.SIGTERM)
    else:
        _signal_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(KILL_GRACE_SECONDS):
            await proc.wait()
    # Always: the leader may have died on SIGTERM while a child ignores it.
    _signal_group(proc.pid, signal.SIGKILL)
    await proc.wait()


async def _open_capture(fd: int, limit: int) -> _Capture:
    loop = asyncio.get_running_loop()
    capture = _Capture(limit, loop.create_future())
    pipe = os.fdopen(fd, "rb", buffering=0)
    try:
        await loop.connect_read_pipe(lambda: capture, pipe)
    except BaseException:
        pipe.close()
        raise
    return capture


async def run_process(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    timeout_ms: float,
    limit: int,
    workdir: str | None = None,
    policy: SandboxPolicy | None = None,
    workdir_fd: int | None = None,
) -> RunResult:
    """Run ``argv`` in the sandbox (see :mod:`tools_base.sandbox`; ``workdir`` read-write, the
    workdir ``cwd`` when not given, bound from ``workdir_fd`` when given), in its own process
    group, with bounded output capture.

    The pipes are ours, not the subprocess transport's, so waiting for the exit does not also
    wait for background grandchildren that inherited them.
    """
    started = time.monotonic()
    policy = policy or SandboxPolicy()
    # The workspace's disk quota: looked at before, while and after the program runs.
    guard = Guard(workdir or cwd, policy.limits.disk_mib)
    await guard.before()
    # Network on: the program's only way out is this call's proxy, recorded on its span.
    proxy = None
    if policy.network:
        proxy = sandbox.NetworkProxy(
            policy.network_rules, sink=sandbox.connection_sink.get(), label=argv[0]
        )
        await proxy.start()
    try:
        # Probing and the call's cgroup touch the file system: off the loop.
        launch = await asyncio.to_thread(
            sandbox.prepare,
            argv,
            env=env,
            cwd=cwd,
            workdir=workdir or cwd,
            policy=policy,
            workdir_fd=workdir_fd,
            proxy=proxy.handoff if proxy is not None else None,
        )
        if proxy is not None and launch.backend is sandbox.SandboxMode.OFF:
            await proxy.close()  # no sandbox (policy.sandbox: off): the host's network
            proxy = None
        try:
            result = await _run_launch(
                launch, cwd=cwd, timeout_ms=timeout_ms, limit=limit, started=started, guard=guard
            )
        finally:
            launch.close()
    finally:
        if proxy is not None:
            await proxy.close()
    await guard.after()
    if guard.exceeded is not None:
        raise guard.error(result.stderr[-QUOTA_OUTPUT_CHARS:].strip())
    return result


async def _run_launch(
    launch: sandbox.Launch,
    *,
    cwd: str,
    timeout_ms: float,
    limit: int,
    started: float,
    guard: Guard | None = None,
) -> RunResult:
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    unowned_read, unowned_write = [out_r, err_r], [out_w, err_w]
    captures: list[_Capture] = []
    try:
        while unowned_read:
            captures.append(await _open_capture(unowned_read.pop(0), limit))
        try:
            proc = await _spawn(launch, cwd, out_w, err_w)
        finally:
            while unowned_write:
                os.close(unowned_write.pop())
        timed_out = await _wait(proc, launch, captures, timeout_ms, guard)
    finally:
        for fd in unowned_read + unowned_write:
            os.close(fd)
        for capture in captures:
            capture.close()
    code, sig = _exit_status(proc, launch.backend)
    stdout, stderr = captures
    return RunResult(
        stdout=stdout.text(),
        stderr=stderr.text(),
        stdout_truncated=stdout.truncated,
        stderr_truncated=stderr.truncated,
        exit_code=-1 if timed_out or code < 0 else code,
        signal=sig,
        timed_out=timed_out,
        duration_ms=round((time.monotonic() - started) * 1000),
    )


async def _spawn(
    launch: sandbox.Launch, cwd: str, out_w: int, err_w: int
) -> asyncio.subprocess.Process:
    try:
        return await asyncio.create_subprocess_exec(
            *launch.argv,
            cwd=cwd,
            env=launch.env,
            stdin=subprocess.DEVNULL,
            stdout=out_w,
            stderr=err_w,
            start_new_session=True,
            preexec_fn=launch.preexec,
            pass_fds=launch.pass_fds,
        )
    except OSError as exc:
        raise ToolError(
            f"could not start {launch.argv[0]!r}: {exc.strerror or exc}",
            code=ToolCode.E_BASH_SPAWN_FAILED,
            suggestion="Check that the shell exists and is executable.",
        ) from exc


async def _wait(
    proc: asyncio.subprocess.Process,
    launch: sandbox.Launch,
    captures: list[_Capture],
    timeout_ms: float,
    guard: Guard | None,
) -> bool:
    """Wait for the program and its output, then end its group; whether it timed out."""
    timed_out = False
    watcher = (
        asyncio.create_task(guard.watch(lambda: _terminate_group(proc, launch.backend)))
        if guard is not None
        else None
    )
    try:
        try:
            async with asyncio.timeout(timeout_ms / 1000 if timeout_ms > 0 else None):
                await proc.wait()
        except TimeoutError:
            timed_out = True
            await _terminate_group(proc, launch.backend)
        await asyncio.wait([c.closed for c in captures], timeout=DRAIN_GRACE_SECONDS)
        # The call is over: so are the jobs it left in its group (`cmd &`, `nohup cmd &`).
        _signal_group(proc.pid, signal.SIGKILL)
    except BaseException:  # cancelled (the executor's timeout) or a bug: leave nothing behind
        if proc.returncode is None:
            _signal_group(proc.pid, signal.SIGKILL)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(REAP_GRACE_SECONDS):
                    await proc.wait()
        raise
    finally:
        if watcher is not None:
            watcher.cancel()
    return timed_out


def _exit_status(
    proc: asyncio.subprocess.Process, backend: sandbox.SandboxMode
) -> tuple[int, str | None]:
    """The exit code (negative for a signal) and the signal's name, if one ended it."""
    code = proc.returncode if proc.returncode is not None else -1
    if backend is sandbox.SandboxMode.BWRAP and code > 128 and code - 128 in _SIGNALS:
        code = 128 - code  # bubblewrap exits 128+N when its program died of signal N
    sig = signal.Signals(-code).name if code < 0 and -code in signal.valid_signals() else None
    return code, sig


@contextlib.asynccontextmanager
async def _pinned_workdir(ctx: ToolContext) -> AsyncIterator[tuple[str, int]]:
    """The workdir's path and descriptor for one call, checked to be the instance's own
    directory (``E_SPAWN_CWD_REFUSED`` otherwise): the sandbox binds the descriptor."""
    pinned = acquire_workdir(ctx)
    try:
        workdir = await asyncio.to_thread(pinned.__enter__)
    except FileNotFoundError as exc:
        raise ToolError(
            f"the workdir {str(ctx.workdir)!r} does not exist",
            code=ToolCode.E_BASH_CWD_NOT_FOUND,
        ) from exc
    try:
        yield workdir
    finally:
        pinned.__exit__(None, None, None)


def inherited_environment(
    names: tuple[str, ...], environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The variables of ``environ`` (default the process's) that ``names`` allow.

    A name ending in ``*`` allows every variable with that prefix. ``PATH`` falls back to the
    system default, so a command always finds the usual programs.
    """
    source = os.environ if environ is None else environ
    exact = {n for n in names if not n.endswith("*")}
    prefixes = tuple(n[:-1] for n in names if n.endswith("*"))
    env = {k: v for k, v in source.items() if k in exact or (prefixes and k.startswith(prefixes))}
    env.setdefault("PATH", os.defpath)
    return env


def _environment(base: dict[str, str], overrides: JsonObject | None) -> dict[str, str]:
    env = dict(base)
    for key, value in (overrides or {}).items():
        text = primitive_to_string(value)
        if text is None:
            raise invalid_arg(f"env.{key} must be a primitive string/number/boolean value")
        if not key or "=" in key or "\x00" in key or "\x00" in text:
            raise invalid_arg(f"env key {key!r} is not a valid variable name/value")
        env[key] = text
    return env


def _timeout_ms(input: JsonObject) -> float:
    value = optional_number(input, "timeoutMs")
    return DEFAULT_TIMEOUT_MS if value is None else value


class BashTool:
    """The handlers, bound to one config."""

    def __init__(self, config: BashConfig) -> None:
        self.config = config

    def _env(self, input: JsonObject) -> dict[str, str]:
        # Read at each call: the agent's environment may change while it runs.
        base = inherited_environment(INHERITED_ENV + self.config.pass_env)
        return _environment(base, optional_object(input, "env"))

    def _workspace(self, ctx: ToolContext) -> Workspace:
        return Workspace(
            ctx.workdir, allow_outside=self.config.allow_outside_workdir, code=OUTSIDE_WORKDIR
        )

    def _policy(self, ctx: ToolContext, path: str, *, read_only: bool = False) -> SandboxPolicy:
        """The Tool's sandbox policy, plus ``path`` where ``allowOutsideWorkdir`` let it lie
        outside the workspace (it must be visible inside to be used)."""
        policy = self.config.sandbox
        if self._workspace(ctx).contains(os.path.realpath(path)):
            return policy
        if read_only:
            return replace(policy, read_only=(*policy.read_only, path))
        return replace(policy, read_write=(*policy.read_write, path))

    def _cwd(self, ctx: ToolContext, cwd_input: str | None, workdir: str) -> str:
        cwd = self._workspace(ctx).resolve(cwd_input).real if cwd_input else workdir
        if not os.path.isdir(cwd):
            raise ToolError(
                f"cwd {cwd_input or cwd!r} is not an existing directory",
                code=ToolCode.E_BASH_CWD_NOT_FOUND,
                suggestion="Create it first (mkdir -p) or omit cwd to run in the workdir.",
            )
        return cwd

    def _script_path(self, ctx: ToolContext, path: str, workdir: str) -> str:
        script_path = self._workspace(ctx).resolve(path).real
        if not os.path.isfile(script_path):
            raise ToolError(
                f"script {path!r} does not exist",
                code=ToolCode.E_BASH_SCRIPT_NOT_FOUND,
                suggestion="Write the script first (file-system__write), or check the path.",
            )
        self._cwd(ctx, None, workdir)
        return script_path

    async def exec(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``exec``: ``/bin/sh -lc <command>``."""
        command = require_string(input, "command")
        cwd_input = optional_string(input, "cwd")
        timeout_ms = _timeout_ms(input)
        env = self._env(input)
        async with _pinned_workdir(ctx) as (workdir, workdir_fd):
            # realpath/stat may block on a slow file system: off the loop.
            cwd = await asyncio.to_thread(self._cwd, ctx, cwd_input, workdir)
            result = await run_process(
                ["/bin/sh", "-lc", command],
                cwd=cwd,
                env=env,
                timeout_ms=timeout_ms,
                limit=self.config.max_output_bytes,
                workdir=workdir,
                policy=self._policy(ctx, cwd),
                workdir_fd=workdir_fd,
            )
        return {"command": command, "cwd": cwd, **result.to_json()}

    async def script(self, ctx: ToolContext, input: JsonObject) -> JsonValue:
        """``script``: ``<shell> <path> ...args`` in the workdir."""
        path = require_string(input, "path")
        args = optional_string_list(input, "args") or []
        shell = optional_string(input, "shell") or "/bin/bash"
        timeout_ms = _timeout_ms(input)
        env = self._env(input)
        async with _pinned_workdir(ctx) as (workdir, workdir_fd):
            script_path = await asyncio.to_thread(self._script_path, ctx, path, workdir)
            if shutil.which(shell, path=env.get("PATH")) is None:
                raise ToolError(
                    f"could not start {shell!r}: not an executable file",
                    code=ToolCode.E_BASH_SPAWN_FAILED,
                    suggestion="Check that the shell exists and is executable.",
                )
            result = await run_process(
                [shell, script_path, *args],
                cwd=workdir,
                env=env,
                timeout_ms=timeout_ms,
                limit=self.config.max_output_bytes,
                workdir=workdir,
                policy=self._policy(ctx, os.path.dirname(script_path), read_only=True),
                workdir_fd=workdir_fd,
            )
        args_out: list[JsonValue] = list(args)
        return {"path": script_path, "shell": shell, "args": args_out, **result.to_json()}

    def handlers(self) -> dict[str, ToolHandler]:
        """Export name → handler."""
        return {"exec": self.exec, "script": self.script}


def configure(config: JsonObject) -> dict[str, ToolHandler]:
    """Handlers for one Tool config; raises ``ToolConfigError`` on a bad one."""
    reader = ConfigReader("bash", config)
    parsed = BashConfig(
        allow_outside_workdir=reader.flag("allowOutsideWorkdir", False),
        max_output_bytes=reader.integer("maxOutputBytes", DEFAULT_MAX_OUTPUT_BYTES),
        pass_env=tuple(reader.strings("passEnv")),
        sandbox=SandboxPolicy.from_config("bash", reader.raw("sandbox")),
    )
    reader.finish()
    return BashTool(parsed).handlers()


handlers = configure({})
