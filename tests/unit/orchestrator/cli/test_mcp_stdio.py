"""``goondan mcp``: which daemon's ``/mcp`` the stdio bridge forwards to, and how."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli.mcp_stdio import Upstream
from orchestrator.http.client import ApiUrl, DaemonApi


def test_the_state_directory_is_reached_over_its_socket_without_a_token(tmp_path: Path) -> None:
    upstream = Upstream.of(DaemonApi(tmp_path))
    assert upstream.socket == str(tmp_path / "api.sock")
    assert upstream.url == "http://localhost/mcp"
    assert upstream.headers == {}


def test_a_url_is_reached_over_tcp_with_its_token() -> None:
    api = DaemonApi(url=ApiUrl.parse("http://[::1]:8080"), token="s3cret")
    upstream = Upstream.of(api)
    assert upstream.socket is None
    assert upstream.url == "http://[::1]:8080/mcp"
    assert upstream.headers == {"Authorization": "Bearer s3cret"}
    assert "s3cret" not in upstream.where  # errors name the daemon, never its token
