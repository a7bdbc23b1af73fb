"""Web pages against the daemon's network face: a real daemon on loopback TCP with no token
(as the README's first walkthrough runs it), real HTTP clients, and a real Chromium showing a
page of another origin. The page cannot make the daemon act, a request under another Host name
is refused, and an origin the operator allows gets through its preflight.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx2
import pytest

from tests.support.listening import (
    agent_row,
    instance_keys,
    listening_example,
    workspace_files,
)
from tests.support.pages import origin_of, page_elsewhere
from tests.support.studio import chromium

pytestmark = pytest.mark.timeout(120)


def test_a_page_on_another_origin_cannot_make_the_loopback_api_act(tmp_path: Path) -> None:
    with page_elsewhere() as page_url:
        daemon, api = listening_example(tmp_path)
        try:
            with httpx2.Client(base_url=api, timeout=30) as http:
                # The worker runs, and the coordinator has a conversation a fresh restart of
                # it would delete.
                warm = {"input": "write before.txt warm", "instanceKey": "warm"}
                assert http.post("/v1/agents/worker/requests", json=warm).status_code == 200
                kept = {"input": "hello", "instanceKey": "kept"}
                assert http.post("/v1/agents/coordinator/requests", json=kept).status_code == 200
                assert instance_keys(http, "coordinator") == ["kept"]
                coordinator = pid_of(http, "coordinator")

                with chromium() as browser:
                    page = browser.new_page()
                    page.goto(page_url)
                    outcomes = page.evaluate("api => window.attack(api)", api)

                # The worker takes its default instance's Turns one at a time, in order: once
                # this one is answered, a send the page had got in would have run before it.
                after = {"input": "write after.txt barrier"}
                answer = http.post("/v1/agents/worker/requests", json=after)
                assert answer.status_code == 200, answer.text
                assert instance_keys(http, "coordinator") == ["kept"]
                assert pid_of(http, "coordinator") == coordinator  # not restarted
        finally:
            daemon.stop()
    # The simple requests went out (a browser does not ask before those) and did nothing;
    # the JSON one never left the browser: its preflight was refused.
    assert outcomes[:2] == ["opaque 0 ", "opaque 0 "], outcomes
    assert outcomes[2].startswith("failed: TypeError"), outcomes
    assert workspace_files(tmp_path, "from-browser.txt") == []
    assert len(workspace_files(tmp_path, "after.txt")) == 1


def pid_of(http: httpx2.Client, agent: str) -> int:
    pid = agent_row(http, agent)["pid"]
    assert isinstance(pid, int), pid
    return pid


def test_a_request_under_a_name_the_listener_does_not_have_is_refused(tmp_path: Path) -> None:
    daemon, api = listening_example(tmp_path)
    port = api.rpartition(":")[2]
    try:
        with httpx2.Client(base_url=api, timeout=30) as http:
            # DNS rebinding: the page's own name, now resolving to 127.0.0.1.
            for host in ("attacker.example", f"attacker.example:{port}", "127.0.0.1:1"):
                answer = http.get("/v1/agents", headers={"Host": host})
                assert answer.status_code == 421, (host, answer.text)
                assert answer.json()["error"]["code"] == "MISDIRECTED_REQUEST"
                assert "allowedHosts" in answer.json()["error"]["message"]
            for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"):
                answer = http.get("/v1/agents", headers={"Host": host})
                assert answer.status_code == 200, (host, answer.text)
    finally:
        daemon.stop()


def test_allowed_hosts_add_names_the_listener_answers_to(tmp_path: Path) -> None:
    daemon, api = listening_example(tmp_path, "{allowedHosts: [api.example.test, 'b.test:1']}")
    port = api.rpartition(":")[2]
    try:
        with httpx2.Client(base_url=api, timeout=30) as http:
            for host, status in [
                (f"api.example.test:{port}", 200),
                ("api.example.test", 200),  # as behind a proxy that drops the port
                ("b.test:1", 200),
                (f"b.test:{port}", 421),
                (f"attacker.example:{port}", 421),
            ]:
                answer = http.get("/v1/agents", headers={"Host": host})
                assert answer.status_code == status, (host, answer.text)
    finally:
        daemon.stop()


def test_origin_and_content_type_are_checked_on_tcp_and_api_sock(tmp_path: Path) -> None:
    daemon, api = listening_example(tmp_path)
    socket = httpx2.HTTPTransport(uds=str(tmp_path / ".goondan" / "api.sock"))
    try:
        with (
            httpx2.Client(base_url=api, timeout=30) as tcp,
            httpx2.Client(transport=socket, base_url="http://goondan", timeout=30) as unix,
        ):
            for http in (tcp, unix):
                elsewhere = {"Origin": "http://evil.example"}
                seen = http.get("/v1/agents", headers=elsewhere)
                assert seen.status_code == 403, seen.text
                assert seen.json()["error"]["code"] == "ORIGIN_NOT_ALLOWED"
                preflight = http.options(
                    "/v1/agents/worker/sends",
                    headers={**elsewhere, "Access-Control-Request-Method": "POST"},
                )
                assert preflight.status_code == 403
                assert "access-control-allow-origin" not in preflight.headers
                body = json.dumps({"input": "write typed.txt plain text", "instanceKey": "t"})
                for given in ({"Content-Type": "text/plain"}, {}):
                    plain = http.post("/v1/agents/worker/sends", content=body, headers=given)
                    assert plain.status_code == 415, plain.text
                    error = plain.json()["error"]
                    assert error["code"] == "UNSUPPORTED_MEDIA_TYPE"
                    assert "Content-Type" in error["message"]
                bare = http.post("/v1/agents/coordinator/restart?fresh=1")
                assert bare.status_code == 415
                # A DELETE with a body must say it is JSON; one with none may not (the MCP
                # client ends its session so), and a page can send neither cross-origin.
                gone = http.request(
                    "DELETE", "/v1/agents/worker/instances/t", content=b"x=1",
                    headers={"Content-Type": "application/x-www-form-urlencoded"},
                )  # fmt: skip
                assert gone.status_code == 415
            assert instance_keys(unix, "worker") == []
            typed = tcp.post("/v1/agents/worker/requests", json={"input": "write ok.txt json"})
            assert typed.status_code == 200, typed.text
    finally:
        daemon.stop()
    assert workspace_files(tmp_path, "typed.txt") == []


def test_an_origin_the_swarm_allows_gets_through_its_preflight(tmp_path: Path) -> None:
    with page_elsewhere() as page_url:
        origin = origin_of(page_url)
        daemon, api = listening_example(tmp_path, f"{{corsOrigins: ['{origin}']}}")
        try:
            with httpx2.Client(base_url=api, timeout=30) as http:
                asked = {
                    "Origin": origin,
                    "Access-Control-Request-Method": "POST",
                    "Access-Control-Request-Headers": "content-type",
                }
                preflight = http.options("/v1/agents/worker/requests", headers=asked)
                assert preflight.status_code == 200, preflight.text
                assert preflight.headers["access-control-allow-origin"] == origin
                assert "POST" in preflight.headers["access-control-allow-methods"]
                other = {**asked, "Origin": "http://127.0.0.1:9"}
                assert http.options("/v1/agents/worker/requests", headers=other).status_code == 403

            with chromium() as browser:
                page = browser.new_page()
                page.goto(page_url)
                outcome = page.evaluate(f"api => window.ask(api, 'write cors.txt {TEXT}')", api)
        finally:
            daemon.stop()
    kind, status, body = outcome.split(" ", 2)
    assert (kind, status) == ("cors", "200"), outcome
    assert json.loads(body)["output"] == f"wrote {len(TEXT)} bytes to cors.txt"
    [written] = workspace_files(tmp_path, "cors.txt")
    assert written.read_text() == TEXT


TEXT = "from an allowed page"
