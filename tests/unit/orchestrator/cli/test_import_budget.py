"""What the hot commands import: ``--help``, ``status``, ``send`` and a completion each run in a
fresh interpreter (``-X importtime`` lists every module it imported), against a stand-in
daemon on an ``api.sock`` that answers the daemon's recorded bodies (tests/golden/http).

Deterministic first: none of them imports the daemon's stack (asyncio, the IPC channel,
structlog and its rich renderer, yaml, ssl, http.client) or a command module it does not run;
``--help`` not even the typed answers, and nothing beyond argparse and the parser. (What the
imports cost in time is measured by ``benchmarks/cli.py``; a test here counts modules, which a
loaded machine does not change.)
"""

from __future__ import annotations

import importlib
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[4]
GOLDEN = ROOT / "tests" / "golden" / "http"
PARSER_MODULES = frozenset(
    {"orchestrator", "orchestrator.cli", "orchestrator.cli.commands", "orchestrator.cli.parser"}
)
"""All ``--help`` imports beyond ``python -m``, argparse printing a help and the two modules
every one of ours imports: the parser and its packages."""

DAEMON_STACK = frozenset(
    {
        "asyncio",
        "ipc",
        "ipc.channel",
        "ipc.runtime_events",
        "structlog",
        "structlog.dev",
        "rich",
        "yaml",
        "ssl",
        "multiprocessing",
        "http.client",
        "email",
        "uvloop",
        "httpx",
        "pydantic",
        "bundle",
        "orchestrator.daemon",
        "orchestrator.operations.protocol",
    }
)
"""What no hot command imports."""
COMMAND_MODULES = frozenset(
    f"orchestrator.cli.{name}"
    for name in (
        "approvals",
        "events",
        "mcp_stdio",
        "operate",
        "project",
        "run",
        "send",
        "studio",
        "test_command",
        "tool",
        "validate",
        "packages",
        "logs",
        "doctor",
    )
)
"""Each command's module: imported by that command only."""
TYPED = frozenset({"msgspec", "orchestrator.operations.answers", "dataclasses", "inspect"})
"""The typed answers (and what msgspec imports): ``status`` reads its answer with them."""


def imported(stderr: str) -> set[str]:
    """The modules ``-X importtime`` says were imported."""
    return {
        line.split("|")[2].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.split("|")[1].strip().isdigit()
    }


def run(
    argv: list[str], env: dict[str, str] | None = None, cache: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -X importtime ARGV`` in a fresh interpreter, bytecode cached in ``cache``."""
    environ = {name: value for name, value in os.environ.items() if name != "_ARGCOMPLETE"}
    environ.update(env or {})
    if cache is not None:
        environ.pop("PYTHONDONTWRITEBYTECODE", None)
        environ["PYTHONPYCACHEPREFIX"] = str(cache)
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env=environ,
        check=False,
    )


def golden(name: str) -> tuple[int, bytes]:
    """A recorded answer of the daemon, its placeholders filled as a daemon would."""
    status, body = (GOLDEN / name).read_text().split("\n", 1)
    body = body.strip().replace('"<pid>"', "4242").replace("<request-id>", "req_1")
    return int(status), body.encode()


ROUTES = {
    ("GET", "/v1/agents"): "agents.json",
    ("POST", "/v1/agents/alpha/requests"): "request.json",
}
"""What the stand-in daemon answers, and with which recorded body."""


class StandInDaemon:
    """An HTTP server on ``state_dir/api.sock`` answering the daemon's recorded bodies."""

    def __init__(self, state_dir: Path) -> None:
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(state_dir / "api.sock"))
        self.server.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.server.accept()
            except OSError:
                return
            with connection:
                self.answer(connection)

    def answer(self, connection: socket.socket) -> None:
        connection.settimeout(30)
        received = b""
        while b"\r\n\r\n" not in received:
            received += connection.recv(65536)
        head, _, body = received.partition(b"\r\n\r\n")
        request_line, *lines = head.decode("latin-1").split("\r\n")
        length = next(
            (
                int(line.split(":")[1])
                for line in lines
                if line.lower().startswith("content-length")
            ),
            0,
        )
        while len(body) < length:
            body += connection.recv(65536)
        method, target, _ = request_line.split(" ")
        status, answer = golden(ROUTES[(method, target)])
        connection.sendall(
            f"HTTP/1.1 {status} OK\r\ncontent-type: application/json\r\n"
            f"content-length: {len(answer)}\r\nconnection: close\r\n\r\n".encode()
            + answer
        )

    def close(self) -> None:
        self.server.close()


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Path]:
    """A state directory whose ``api.sock`` a stand-in daemon serves."""
    state = tmp_path / "state"
    (state / "agents" / "alpha").mkdir(parents=True)
    served = StandInDaemon(state)
    try:
        yield state
    finally:
        served.close()


@pytest.mark.timeout(120)
def test_help_imports_argparse_and_the_parser_only(tmp_path: Path) -> None:
    done = run(["-m", "orchestrator", "--help"], cache=tmp_path / "pyc")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "status" in done.stdout
    modules = imported(done.stderr)
    assert "orchestrator.cli.parser" in modules  # what is looked for is found
    unwanted = (DAEMON_STACK | COMMAND_MODULES | TYPED) & modules
    unwanted |= {name for name in modules if name.split(".")[0] in ("ipc", "bundle")}
    also_not = {"json", "socket", "typing", "goondan.errors", "shutil", "orchestrator.cli.common"}
    assert not unwanted | (also_not & modules)


@pytest.mark.timeout(120)
def test_status_imports_its_answer_types_and_nothing_of_the_daemon(
    daemon: Path, tmp_path: Path
) -> None:
    done = run(["-m", "orchestrator", "status", "--state-dir", str(daemon)], cache=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "swarm golden (orchestrator pid 4242)" in done.stdout
    assert {"alpha", "beta"} <= set(done.stdout.split())
    modules = imported(done.stderr)
    assert {"orchestrator.cli.operate", "msgspec"} <= modules
    assert not (DAEMON_STACK | (COMMAND_MODULES - {"orchestrator.cli.operate"})) & modules


@pytest.mark.timeout(120)
def test_send_reads_its_answer_without_the_typed_answers(daemon: Path, tmp_path: Path) -> None:
    argv = ["-m", "orchestrator", "send", "alpha", "hello", "--state-dir", str(daemon)]
    done = run(argv, cache=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "done, ünïcode"
    modules = imported(done.stderr)
    assert "orchestrator.cli.send" in modules
    assert not (DAEMON_STACK | TYPED | (COMMAND_MODULES - {"orchestrator.cli.send"})) & modules


@pytest.mark.timeout(120)
def test_a_completion_builds_the_command_it_completes_only(daemon: Path, tmp_path: Path) -> None:
    line = f"goondan send --state-dir {daemon} al"
    out = tmp_path / "completions"
    done = run(
        ["-m", "orchestrator"],
        env={
            "_ARGCOMPLETE": "1",
            "_ARGCOMPLETE_IFS": "\n",
            "COMP_LINE": line,
            "COMP_POINT": str(len(line)),
            "COMP_TYPE": "9",
            "_ARGCOMPLETE_STDOUT_FILENAME": str(out),
        },
        cache=tmp_path / "pyc",
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert out.read_text().split() == ["alpha"]
    modules = imported(done.stderr)
    assert "argcomplete" in modules
    assert not (DAEMON_STACK | COMMAND_MODULES | TYPED) & modules
    # The shell script's resources are the `completion` command's, not every completion's.
    assert not {"importlib.resources", "tempfile"} & modules
    # Completing a command that asks the daemon reads the state directory, never the daemon:
    # its options are added without the client that would ask.
    assert not {"orchestrator.http.client", "orchestrator.cli.api_target", "socket"} & modules


def test_help_imports_the_parser_and_argparse_only(tmp_path: Path) -> None:
    cache = tmp_path / "pyc"
    done = run(["-m", "orchestrator", "--help"], cache=cache)
    assert done.returncode == 0, done.stderr[-2000:]
    # What `python -m` and argparse import themselves differs between Python versions.
    floor = imported(
        run(
            [
                "-c",
                "import argparse, runpy, __future__, collections.abc; "
                "argparse.ArgumentParser(prog='p').format_help()",
            ],
            cache=cache,
        ).stderr
    )
    assert imported(done.stderr) - floor == PARSER_MODULES


@pytest.mark.parametrize(
    ("package", "names"),
    [
        ("ipc", None),
        ("orchestrator.operations", None),
        ("goondan.errors", ("CONFIG", "DELIVERY", "TOOL", "HTTP", "HttpCode", "Catalogue")),
    ],
)
def test_a_package_importing_lazily_still_offers_every_name(
    package: str, names: tuple[str, ...] | None
) -> None:
    module = importlib.import_module(package)
    for name in names or module.__all__:
        assert getattr(module, name) is not None, name
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_every_catalogue_is_listed_once() -> None:
    import goondan.errors as errors

    assert [c.markdown() for c in errors.CATALOGUES] == [
        c.markdown() for c in (errors.CONFIG, errors.TOOL, errors.DELIVERY, errors.HTTP)
    ]


def test_every_command_names_a_function_that_exists() -> None:
    from orchestrator.cli.commands import LazyCommand
    from orchestrator.cli.parser import build_parser

    parser = build_parser()
    [commands] = [a for a in parser._actions if a.dest == "command"]
    assert commands.choices is not None
    for name, sub in dict(commands.choices).items():
        run_command = sub.get_default("run")
        assert isinstance(run_command, LazyCommand), name
        assert callable(run_command.resolve()), name
