"""Which daemon a CLI command talks to: ``--api-url`` / ``GOONDAN_API_URL`` parsed, the token
read from the variable ``--api-token-env`` names, and every refusal naming its source."""

from __future__ import annotations

import argparse
import socket
import threading
from pathlib import Path

import pytest

from goondan.errors import ExitCode
from orchestrator.cli.api_options import API_URL_ENV, add_options
from orchestrator.cli.api_target import (
    TargetError,
    ask,
    daemon_api,
    remote_url,
    remote_urls,
)
from orchestrator.http.client import ApiUrl, DaemonApi, LeaderLost


@pytest.mark.parametrize(
    ("text", "host", "port", "authority"),
    [
        ("http://127.0.0.1:8080", "127.0.0.1", 8080, "127.0.0.1:8080"),
        ("http://swarm.internal:80/", "swarm.internal", 80, "swarm.internal:80"),
        (" http://[::1]:9000 ", "::1", 9000, "[::1]:9000"),
    ],
)
def test_a_url_names_host_and_port(text: str, host: str, port: int, authority: str) -> None:
    url = ApiUrl.parse(text)
    assert (url.host, url.port, url.authority) == (host, port, authority)
    assert str(url) == f"http://{authority}"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("https://127.0.0.1:8080", "not https"),
        ("127.0.0.1:8080", "is not http://HOST:PORT"),
        ("http://127.0.0.1", "a host and a port"),
        ("http://127.0.0.1:8080/v1", "no path"),
        ("http://me@127.0.0.1:8080", "no path, query or user"),
        ("http://127.0.0.1:99999", "is not http://HOST:PORT"),
    ],
)
def test_anything_else_is_refused_saying_what_is_wrong(text: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        ApiUrl.parse(text)


def options(**given: str | None) -> argparse.Namespace:
    return argparse.Namespace(**{"api_url": None, "api_token_env": None, **given})


def test_the_option_wins_over_the_environment_and_errors_name_their_source(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(API_URL_ENV, "http://10.0.0.5:8080")
    assert remote_url(options()) == ApiUrl("10.0.0.5", 8080)
    assert remote_url(options(api_url="http://127.0.0.1:1")) == ApiUrl("127.0.0.1", 1)
    monkeypatch.setenv(API_URL_ENV, "10.0.0.5:8080")
    with pytest.raises(TargetError, match=f"^{API_URL_ENV}: ") as from_env:
        remote_url(options())
    assert from_env.value.exit_code == ExitCode.USAGE
    with pytest.raises(TargetError, match=r"^--api-url: "):
        remote_url(options(api_url="ftp://x:1"))
    monkeypatch.delenv(API_URL_ENV)
    assert remote_url(options()) is None


def test_the_token_comes_from_the_named_variable_and_api_sock_needs_none(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(API_URL_ENV, raising=False)
    monkeypatch.setenv("SWARM_TOKEN", "s3cret")
    local = daemon_api(options(api_token_env="SWARM_TOKEN"), lambda: tmp_path)
    assert (local.path, local.url, local.token) == (tmp_path / "api.sock", None, None)
    remote = daemon_api(
        options(api_url="http://127.0.0.1:8080", api_token_env="SWARM_TOKEN"), lambda: tmp_path
    )
    assert (remote.url, remote.token) == (ApiUrl("127.0.0.1", 8080), "s3cret")
    for value, says in (("", "not set or empty"), ("a b", "spaces or control characters")):
        monkeypatch.setenv("SWARM_TOKEN", value)
        with pytest.raises(TargetError, match=f"--api-token-env SWARM_TOKEN: .*{says}") as info:
            daemon_api(options(api_url="http://h:1", api_token_env="SWARM_TOKEN"), Path)
        assert info.value.exit_code == ExitCode.AUTH


def one_answer(answer: bytes) -> tuple[int, list[bytes]]:
    """A listener on a free port that answers one request with ``answer``; its port, and the
    list the request's bytes will be put in."""
    server = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        with server:
            conn, _ = server.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                seen.append(data)
                conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    return server.getsockname()[1], seen


def test_a_request_over_tcp_names_the_host_and_carries_the_token() -> None:
    body = b'{"ok": true}'
    port, seen = one_answer(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
    api = DaemonApi(url=ApiUrl("127.0.0.1", port), token="s3cret", timeout=10)
    assert api.call("GET", "/healthz") == (200, {"ok": True})
    [request] = seen
    assert request.startswith(b"GET /healthz HTTP/1.1\r\n")
    assert f"\r\nHost: 127.0.0.1:{port}\r\n".encode() in request
    assert b"\r\nAuthorization: Bearer s3cret\r\n" in request


def test_a_401_names_the_variable_or_asks_for_one(monkeypatch: pytest.MonkeyPatch) -> None:
    refusal = b'{"error": {"code": "UNAUTHORIZED", "message": "a valid bearer token is required"}}'
    answer = b"HTTP/1.1 401 Unauthorized\r\ncontent-length: %d\r\n\r\n%s" % (
        len(refusal),
        refusal,
    )
    monkeypatch.setenv("SWARM_TOKEN", "wrong")
    for token_env, says in ((None, "pass --api-token-env NAME"), ("SWARM_TOKEN", "$SWARM_TOKEN")):
        port, _ = one_answer(answer)
        given = options(api_url=f"http://127.0.0.1:{port}", api_token_env=token_env)
        with pytest.raises(TargetError, match=says.replace("$", r"\$")) as info:
            ask(given, Path, "GET", "/v1/agents")
        assert info.value.exit_code == ExitCode.AUTH


def test_nobody_listening_is_a_network_failure_naming_the_url() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    with pytest.raises(TargetError, match=f"no daemon answers at http://127.0.0.1:{port}") as info:
        ask(options(api_url=f"http://127.0.0.1:{port}"), Path, "GET", "/healthz")
    assert info.value.exit_code == ExitCode.NETWORK


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port: int = taken.getsockname()[1]
        return port


def test_a_clusters_leaders_are_named_by_a_repeated_option_or_commas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(API_URL_ENV, raising=False)
    parser = argparse.ArgumentParser()
    add_options(parser)
    args = parser.parse_args(["--api-url", "http://h1:1", "--api-url", "http://h2:2,http://h3:3"])
    assert remote_urls(args) == [ApiUrl("h1", 1), ApiUrl("h2", 2), ApiUrl("h3", 3)]
    assert remote_url(args) == ApiUrl("h1", 1)
    api = daemon_api(args, Path)
    assert (api.url, api.standby) == (ApiUrl("h1", 1), [ApiUrl("h2", 2), ApiUrl("h3", 3)])
    with pytest.raises(TargetError, match=r"^--api-url: an empty URL") as info:
        remote_urls(options(api_url="http://h1:1,,http://h2:2"))
    assert info.value.exit_code == ExitCode.USAGE
    with pytest.raises(TargetError, match=r"^--api-url: 'h2:2' is not http://HOST:PORT"):
        remote_urls(options(api_url="http://h1:1,h2:2"))


def ok(body: bytes = b'{"ok": true}') -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def test_the_first_leader_that_answers_is_asked_and_stays_asked() -> None:
    gone = free_port()  # a leader that died: nobody listens there
    port, seen = one_answer(ok())
    api = daemon_api(options(api_url=f"http://127.0.0.1:{gone},http://127.0.0.1:{port}"), Path)

    assert api.call("POST", "/v1/agents/a/requests", {"input": "hi"}) == (200, {"ok": True})
    assert len(seen) == 1
    assert api.url == ApiUrl("127.0.0.1", port)  # the next call goes there first
    with pytest.raises(TargetError, match=f"no leader answers: .*127.0.0.1:{gone}") as info:
        ask(
            options(api_url=f"http://127.0.0.1:{gone},http://127.0.0.1:{free_port()}"),
            Path,
            "GET",
            "/",
        )
    assert info.value.exit_code == ExitCode.NETWORK


def test_a_leader_lost_mid_request_is_leader_lost_unless_the_request_only_reads() -> None:
    dying, _ = one_answer(b"")  # takes the request, closes without an answer
    standby, seen = one_answer(ok())
    api = DaemonApi(
        url=ApiUrl("127.0.0.1", dying), standby=[ApiUrl("127.0.0.1", standby)], timeout=10
    )
    with pytest.raises(LeaderLost, match=f"LEADER_LOST: the leader at http://127.0.0.1:{dying}"):
        api.call("POST", "/v1/agents/a/requests", {"input": "hi"})
    assert seen == []  # not asked twice: it may have run

    dying, _ = one_answer(b"")
    api = DaemonApi(
        url=ApiUrl("127.0.0.1", dying), standby=[ApiUrl("127.0.0.1", standby)], timeout=10
    )
    assert api.call("GET", "/v1/agents") == (200, {"ok": True})
    assert seen[0].startswith(b"GET /v1/agents ")
