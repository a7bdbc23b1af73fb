"""The guides' shell and Python blocks that no other test runs, run as written: in a folder
holding the repository's example swarm, against real ``goondan`` daemons and offline scripted
models, one daemon per page.

A block is found by its annotation (``<!-- run: tests/integration/docs/test_runs.py::TEST -->``
right above it), so a block added under one is run too. What is changed is only what must be:
a written port (``127.0.0.1:8080``) is a free one, a placeholder id (``req_...``) the real one
once known, a collector's address a free port. Pages: docs/guides/http-api.md,
docs/guides/cli.md, docs/guides/connectors.md, docs/guides/writing-a-tool.md,
docs/guides/writing-an-extension.md, docs/guides/opentelemetry.md, docs/guides/studio.md.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import readme
from tests.support.otlp_receiver import ReceivedSpan, otlp_receiver
from tests.support.readme import PageBlock, start_listening_daemon
from tests.support.walkthrough import Shell

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[3]
THIS = "tests/integration/docs/test_runs.py"
PAGE_PORT = "127.0.0.1:8080"
STATUS = re.compile(r"\nHTTP (\d{3})\n$")


@pytest.fixture
def shell(tmp_path: Path) -> Iterator[Shell]:
    """A terminal in a folder holding the example swarm, as goondan.yaml too."""
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml.example")
    shutil.copy(ROOT / "goondan.yaml.example", tmp_path / "goondan.yaml")
    terminal = Shell(tmp_path)
    try:
        yield terminal
    finally:
        terminal.close()


def blocks(test: str) -> list[PageBlock]:
    return readme.blocks_for(THIS, test)


def curl(shell: Shell, command: str) -> tuple[int, str]:
    """A ``curl`` command of a page, as written, with the status written after the body."""
    assert command.startswith("curl "), command
    done = shell.run(command.replace("curl ", "curl -sS -w '\\nHTTP %{http_code}\\n' ", 1))
    assert done.returncode == 0, f"{command}\n{done.stderr}"
    found = STATUS.search(done.stdout)
    assert found is not None, done.stdout
    return int(found.group(1)), done.stdout[: found.start()]


def test_the_http_api_as_the_guide_calls_it(shell: Shell) -> None:
    """Both daemons of the first block; then every ``curl`` of the list, each answered by a
    route of the API (a 404 only for the ids the list makes up, as a JSON error), the request
    answered ``ok``, and the streamed request of the last block ending in its answer."""
    daemons, listing, streamed = blocks("test_the_http_api_as_the_guide_calls_it")
    plain, with_token = daemons.commands()
    daemon = start_listening_daemon(shell, plain.text, PAGE_PORT)
    made_up = ("TRACE_OR_REQUEST_ID", "apr_1f2e3d4c5b6a7980")
    for command in listing.commands():
        if "-N " in command.text:  # events as they happen: the stream opens and stays
            events = shell.start(command.text)
            events.read_until(": ")  # the stream's first comment or event
            events.stop()
            continue
        status, body = curl(shell, command.text)
        where = f"{listing.page}:{command.line}: {command.text}"
        if any(word in command.text for word in made_up):
            assert status == 404, where
            assert "error" in json.loads(body), where
            continue
        assert status < 300, f"{where}\n{status} {body}"
        if command.text.endswith("/coordinator/requests"):
            answer = json.loads(body)
            assert answer["status"] == "ok", answer
            assert answer["output"].startswith("Done. "), answer
            shell.substitutions.append(("req_...", answer["requestId"]))
        if "healthz" in command.text:
            assert json.loads(body)["ok"] is True
    [command] = streamed.commands()
    status, body = curl(shell, command.text)
    assert status == 200
    assert "event: delta" in body
    assert '"agent": "worker"' in body
    final = body.split("event: answer", 1)[1]
    assert '"status": "ok"' in final, body
    assert daemon.stop() == 0, daemon.text[-4000:]

    shell.substitutions.clear()
    guarded = start_listening_daemon(shell, with_token.text, "0.0.0.0:8080")
    port = shell.prepare("0.0.0.0:8080").rsplit(":", 1)[1]
    status, _ = curl(shell, f"curl http://127.0.0.1:{port}/v1/agents")
    assert status == 401  # its token is a secret of the daemon's own
    assert guarded.stop() == 0, guarded.text[-4000:]


def test_the_cli_speaks_to_a_daemon_on_another_host(shell: Shell) -> None:
    """The "daemon elsewhere" block against a daemon on TCP with a token: ``status`` answers,
    ``logs -f`` shows a request made meanwhile."""
    [block] = blocks("test_the_cli_speaks_to_a_daemon_on_another_host")
    daemon = start_listening_daemon(  # the token in its environment only: the block's
        shell,  # export gives it to the commands
        f"GOONDAN_API_TOKEN=a-token-of-the-daemon python -m orchestrator run goondan.yaml "
        f"--listen {PAGE_PORT} --api-token-env GOONDAN_API_TOKEN",
        PAGE_PORT,
    )
    shell.substitutions.append(("10.0.0.5:8080", shell.prepare(PAGE_PORT)))
    shell.substitutions.append(("GOONDAN_API_TOKEN=...", "GOONDAN_API_TOKEN=a-token-of-the-daemon"))
    shell.directory = shell.directory / "elsewhere"  # no state directory of that daemon here
    shell.directory.mkdir()
    following = None
    for command in block.commands():
        text = shell.prepare(command.text)
        if text.startswith("export "):
            shell.env.update(readme.exported(text))
        elif " -f " in f"{text} ":
            following = shell.start(text)
            following.read_until("following")
        else:
            done = shell.run(text)
            assert done.returncode == 0, f"{block.page}:{command.line}\n{done.stderr}"
            assert "coordinator" in done.stdout
            assert "worker" in done.stdout
    assert following is not None
    sent = shell.run(
        "python -m orchestrator send coordinator 'write notes.txt hi' "
        "--api-token-env GOONDAN_API_TOKEN"
    )
    assert sent.returncode == 0, sent.stderr
    following.read_until("turn.completed")
    following.stop()
    assert daemon.stop() == 0, daemon.text[-4000:]


def test_the_cli_connector_reads_lines(shell: Shell) -> None:
    """The example swarm with the guide's ``cli`` Connection reads both lines into its one
    conversation and stops by itself at the end of its input; without the Connection's
    ``ingress``, each line has the conversation the guide says."""
    [connection] = [
        b
        for b in readme.page_blocks("docs/guides/connectors.md")
        if b.lang == "yaml" and "name: cli," in b.text
    ]
    [block] = blocks("test_the_cli_connector_reads_lines")
    example = (ROOT / "goondan.yaml.example").read_text()
    instances = shell.directory / ".goondan" / "agents" / "coordinator" / "instances"
    without_ingress = connection.text.split("  ingress:")[0]
    # with the ingress: one conversation; without: the first line's own, and u42
    for declared, expected in ((connection.text, 1), (without_ingress, 2)):
        (shell.directory / "goondan.yaml").write_text(f"{example}---\n{declared}")
        shutil.rmtree(shell.directory / ".goondan", ignore_errors=True)
        done = shell.run(block.text)  # one pipeline over two lines
        assert done.returncode == 0, done.stderr[-4000:]
        keys = {p.name for p in instances.iterdir()}
        assert len(keys) == expected, keys
        assert ("console" in keys) == (declared is connection.text), keys
        assert ("u42" in keys) == (declared is without_ingress), keys


TOOL_SWARM = """
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: shouter}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^shout (?P<text>.+)$"}
        call: {tool: text-utils__uppercase, args: {text: "{text}"}}
      - when: {toolResult: text-utils__uppercase, status: ok}
        reply: "{result.result}"
      - when: {toolResult: text-utils__uppercase}
        reply: "failed: {errorCode}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coordinator}
spec:
  modelConfig: {modelRef: Model/shouter}
  tools: [Tool/text-utils]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/coordinator
  agents: [Agent/coordinator]
"""


def test_the_tool_of_the_guide_answers(shell: Shell) -> None:
    """The guide's Tool resource with each of its two modules, called by a scripted model."""
    [tool] = [b for b in readme.page_blocks("docs/guides/writing-a-tool.md") if b.lang == "yaml"]
    (shell.directory / "goondan.yaml").write_text(tool.text + TOOL_SWARM)
    (shell.directory / "tools").mkdir()
    for module in blocks("test_the_tool_of_the_guide_answers"):
        (shell.directory / "tools" / "text_utils.py").write_text(module.text)
        done = shell.run("python -m orchestrator run goondan.yaml --input 'shout hello there'")
        assert done.returncode == 0, f"{module.where}\n{done.stderr[-4000:]}"
        assert done.stdout.strip() == "HELLO THERE", module.where


EXTENSION_SWARM = """
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: operator}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^run (?P<command>.+)$"}
        call: {tool: bash__exec, args: {command: "{command}"}}
      - when: {toolResult: bash__exec}
        reply: "{errorCode}: {error}"
      - when: {input: "^how many"}
        call: {tool: audit__turns, args: {}}
      - when: {toolResult: audit__turns}
        reply: "turns: {result}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: coordinator}
spec:
  modelConfig: {modelRef: Model/operator}
  tools:
    - ref: {kind: Tool, name: bash, package: "@goondan/base"}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/coordinator
  agents: [Agent/coordinator]
"""


def test_the_extension_of_the_guide_refuses_and_counts(shell: Shell) -> None:
    """The guide's Extension, in the Agent as the guide lists it: ``bash__exec`` is refused
    before it runs, and ``audit__turns`` counts this conversation's Turns."""
    [declared] = [
        b for b in readme.page_blocks("docs/guides/writing-an-extension.md") if b.lang == "yaml"
    ][:1]
    extension, agent_part = declared.text.split("---\n")
    [module] = blocks("test_the_extension_of_the_guide_refuses_and_counts")
    (shell.directory / "extensions").mkdir()
    (shell.directory / "extensions" / "audit.py").write_text(module.text)
    swarm = EXTENSION_SWARM.replace("  tools:\n", f"{indent(agent_part)}  tools:\n", 1)
    (shell.directory / "goondan.yaml").write_text(f"{extension}---\n{swarm}")
    ask = "python -m orchestrator run goondan.yaml --instance u1 --input"
    refused = shell.run(f"{ask} 'run touch ran.txt'")
    assert refused.returncode == 0, refused.stderr[-4000:]
    assert refused.stdout.strip() == "E_REFUSED: refused by policy"
    assert not list(shell.directory.rglob("ran.txt"))  # the tool never ran
    counted = shell.run(f"{ask} 'how many turns?'")
    assert counted.returncode == 0, counted.stderr[-4000:]
    assert counted.stdout.strip() == "turns: 2"  # this Turn included


def indent(agent_part: str) -> str:
    """The guide's ``extensions:`` list (comment lines dropped), inside an Agent's spec."""
    lines = [line for line in agent_part.splitlines() if not line.startswith("#")]
    return "".join(f"  {line}\n" for line in lines)


def test_spans_reach_a_collector_as_the_guide_sends_them(shell: Shell) -> None:
    """Each daemon of the OpenTelemetry guide, a real OTLP/HTTP receiver where the guide runs
    Jaeger: the request's trace arrives as spans (``invoke_agent`` of both agents), and the
    standard variables name the service."""
    [block] = blocks("test_spans_reach_a_collector_as_the_guide_sends_them")
    shell.env["OTEL_BSP_SCHEDULE_DELAY"] = "100"  # a batch leaves at once, not after 5 s
    with otlp_receiver() as collector:
        shell.substitutions.append(("127.0.0.1:4318", f"127.0.0.1:{collector.port}"))
        daemon = None
        trace = ""
        for command in block.commands():
            if " run goondan.yaml" in command.text:
                if daemon is not None:
                    assert daemon.stop() == 0, daemon.text[-4000:]
                daemon = shell.start(command.text, exec_=not command.text.startswith("OTEL"))
                daemon.json_event("agent ready", agent="coordinator")
            else:
                done = shell.run(command.text)
                assert done.returncode == 0, f"{block.page}:{command.line}\n{done.stderr}"
                trace = json.loads(done.stdout)["turn"]["traceId"]

        def agents_of(spans: list[ReceivedSpan], trace: str) -> set[str]:
            return {s.name for s in spans if s.trace_id == trace and s.name.startswith("invoke")}

        wanted = {"invoke_agent coordinator", "invoke_agent worker"}
        collector.wait_for(lambda spans: agents_of(spans, trace) == wanted, timeout=60)
        [send] = [c.text for c in block.commands() if " send " in c.text]
        done = shell.run(send)  # a request to the daemon the variables configured
        assert done.returncode == 0, done.stderr
        again = json.loads(done.stdout)["turn"]["traceId"]
        spans = collector.wait_for(lambda spans: agents_of(spans, again) == wanted, timeout=60)
        assert {s.resource["service.name"] for s in spans if s.trace_id == again} == {"notes"}
        assert {s.resource["service.name"] for s in spans if s.trace_id == trace} == {"goondan"}
        assert daemon is not None
        assert daemon.stop() == 0, daemon.text[-4000:]


def test_each_studio_of_the_guide_serves_its_link(shell: Shell) -> None:
    """The guide's daemon, then its three studios (started together: they are independent):
    each prints its link (no tab is opened without a terminal) and serves the page there."""
    [block] = blocks("test_each_studio_of_the_guide_serves_its_link")
    shell.substitutions += [
        ("path/to/goondan.yaml", "goondan.yaml"),
        ("/var/lib/swarm/.goondan", str(shell.directory / ".goondan")),
    ]
    daemon, *studios = block.commands()
    running = shell.start(daemon.text)
    running.json_event("agent ready", agent="coordinator")
    # the default port (7711) is a free one: another studio on the machine may hold it
    default = "python -m orchestrator studio"
    texts = [c.text + " --port 0" if c.text == default else c.text for c in studios]
    assert default + " --port 0" in texts
    started = [(c, shell.start(text)) for c, text in zip(studios, texts, strict=True)]
    for command, studio in started:
        [link] = re.findall(r"studio: (http://\S+)", studio.read_until("?key="))
        status, page = curl(shell, f"curl '{link}'")  # as a browser would open it
        assert status == 200, f"{block.page}:{command.line}: {status} {page}"
        assert "<html" in page.lower()
        assert studio.stop() == 0, studio.text[-4000:]
    assert running.stop() == 0, running.text[-4000:]


MISSPELT_TOOL = """\
apiVersion: goondan.ai/v1
kind: Tool
metadata:
  name: echo
spec:
  entry: ./echo.py
  timeoutSecond: 60
  exports:
    - name: say
      description: Say it.
      parameters: {type: object, properties: {}}
"""


def test_a_configuration_error_reads_as_the_guide_shows(shell: Shell) -> None:
    """The CLI guide's sample error, from ``validate`` of a Tool with a misspelt field on the
    line it names."""
    [shown] = blocks("test_a_configuration_error_reads_as_the_guide_shows")
    (shell.directory / "goondan.yaml").write_text(MISSPELT_TOOL)
    (shell.directory / "echo.py").write_text("handlers = {}\n")
    done = shell.run("python -m orchestrator validate goondan.yaml")
    assert done.returncode == 4, done.stderr
    assert shown.text in done.stdout + done.stderr
