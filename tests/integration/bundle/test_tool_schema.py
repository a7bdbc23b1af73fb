"""Tools from type hints, as a user meets them: ``tool schema`` prints the exports entry,
``validate`` warns when the YAML and the hints disagree, and a ``@tool`` handler runs in a
real swarm (``run --input``), refusing arguments its hints refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.support.daemon import run_cli

pytestmark = pytest.mark.timeout(180)

GREET = '''\
from typing import Annotated, Literal

from pydantic import Field

from tools_base import ToolContext, tool


@tool
def hello(
    ctx: ToolContext,
    name: str,
    style: Literal["plain", "loud"] = "plain",
    times: Annotated[int, Field(ge=1)] = 1,
) -> dict:
    """Greet someone by name.

    Args:
        name: The name to greet.
        style: How to say it.
        times: How many times.
    """
    text = " ".join([f"Hello, {name}!"] * times)
    return {"greeting": text.upper() if style == "loud" else text}


handlers = {"hello": hello}
'''

# What `tool schema` prints for GREET's hello, as a Tool's export in goondan.yaml; `times` has
# no `minimum` here, so a call with times 0 reaches the handler, which refuses it.
EXPORT = """\
    - name: hello
      description: Greet someone by name.
      parameters:
        type: object
        properties:
          name: {type: string, description: The name to greet.}
          style: {type: string, enum: [plain, loud], default: plain}
          times: {type: integer, default: 1}
        required: [name]
        additionalProperties: false
"""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^greet (?P<name>\\\\w+) (?P<times>-?\\\\d+) times$"}
        call: {tool: greet__hello, args: {name: "{name}", times: "{times:int}", style: loud}}
      - when: {toolResult: greet__hello, status: ok}
        reply: "{result.greeting}"
      - when: {toolResult: greet__hello}
        reply: "ERROR {errorCode}: {error}"
      - reply: "say: greet NAME N times"
---
apiVersion: goondan.ai/v1
kind: Tool
metadata: {name: greet}
spec:
  entry: ./tools/greet.py
  exports:
EXPORT---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: assistant}
spec:
  modelConfig: {modelRef: Model/brain}
  tools: [Tool/greet]
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/assistant
  agents: [Agent/assistant]
"""


def write_bundle(root: Path, export: str = EXPORT) -> Path:
    (root / "tools").mkdir(parents=True, exist_ok=True)
    (root / "tools" / "__init__.py").write_text("")
    (root / "tools" / "greet.py").write_text(GREET)
    (root / "goondan.yaml").write_text(SWARM.replace("EXPORT", export))
    return root


def test_the_printed_entry_is_the_export_to_paste(tmp_path: Path) -> None:
    write_bundle(tmp_path)
    printed = run_cli("tool", "schema", "tools/greet.py:hello", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.splitlines()[1] == "  exports:"  # as it stands under `spec:`
    entries = yaml.safe_load(printed.stdout)["exports"]
    assert entries == [
        {
            "name": "hello",
            "description": "Greet someone by name.",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "The name to greet."},
                    "style": {
                        "type": "string",
                        "description": "How to say it.",
                        "enum": ["plain", "loud"],
                        "default": "plain",
                    },
                    "times": {
                        "type": "integer",
                        "description": "How many times.",
                        "default": 1,
                        "minimum": 1,
                    },
                },
                "required": ["name"],
                "additionalProperties": False,
            },
        }
    ]
    as_json = run_cli("tool", "schema", "tools.greet:hello", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == entries
    whole_module = run_cli("tool", "schema", "tools/greet.py", "--json", cwd=tmp_path)
    assert json.loads(whole_module.stdout) == entries


def test_check_says_whether_the_yaml_agrees(tmp_path: Path) -> None:
    write_bundle(tmp_path)
    agrees = run_cli(
        "tool", "schema", "tools/greet.py:hello", "--check", "goondan.yaml", cwd=tmp_path
    )
    assert agrees.returncode == 0, agrees.stderr
    assert agrees.stdout.strip() == "Tool/greet export 'hello': agrees with the handler's hints"

    write_bundle(
        tmp_path,
        EXPORT.replace("name: {type: string,", "name: {type: integer,").replace(
            "required: [name]", "required: [name, shout]"
        ),
    )
    # from elsewhere: the module is found beside the configuration
    differs = run_cli(
        "tool",
        "schema",
        "tools/greet.py:hello",
        "--check",
        str(tmp_path / "goondan.yaml"),
        "--json",
        cwd=tmp_path.parent,
    )
    assert differs.returncode == 4, differs.stderr
    verdict = json.loads(differs.stdout)
    assert verdict["agrees"] is False
    assert verdict["results"][0]["differences"] == [
        "the YAML requires 'shout' but the handler has no parameter 'shout' (every call fails)",
        "'name' is integer in the YAML but string in the handler's hints",
    ]


@pytest.mark.parametrize(
    ("target", "status", "says"),
    [
        ("tools/greet.py:", 2, "is not MODULE:FUNCTION"),
        ("tools/nothere.py:hello", 3, "no file tools/nothere.py (looked at "),
        ("tools.nothere:hello", 3, "no module 'tools.nothere'"),
        ("tools/greet.py:helo", 3, "has no function 'helo' (it defines hello)"),
        ("tools/broken.py:f", 3, "importing tools/broken.py raised RuntimeError: not today"),
        ("tools/opaque.py:f", 4, "parameter 'thing': its type hint Opaque has no JSON Schema"),
    ],
)
def test_what_cannot_be_described_is_named(
    tmp_path: Path, target: str, status: int, says: str
) -> None:
    write_bundle(tmp_path)
    (tmp_path / "tools" / "broken.py").write_text(
        "print('noise at import')\nraise RuntimeError('not today')\n"
    )
    (tmp_path / "tools" / "opaque.py").write_text(
        "class Opaque: ...\n\n\ndef f(ctx, thing: Opaque) -> None: ...\n"
    )
    done = run_cli("tool", "schema", target, "--json", cwd=tmp_path)
    assert done.returncode == status, done.stderr
    error = json.loads(done.stdout)["error"]
    assert says in error["message"]


def test_validate_warns_when_the_yaml_and_the_hints_disagree(tmp_path: Path) -> None:
    write_bundle(tmp_path)
    agreeing = run_cli("validate", "--json", cwd=tmp_path)
    assert agreeing.returncode == 0, agreeing.stdout
    assert json.loads(agreeing.stdout)["warnings"] == []

    write_bundle(tmp_path, EXPORT.replace("style: {type: string,", "style: {type: boolean,"))
    warned = run_cli("validate", cwd=tmp_path)
    assert warned.returncode == 0, warned.stderr
    assert "W_CONFIG_TOOL_HINTS_DIFFER" in warned.stderr
    assert "'style' is boolean in the YAML but string in the handler's hints" in warned.stderr
    strict = run_cli("validate", "--strict", "--json", cwd=tmp_path)
    assert strict.returncode == 4
    (issue,) = json.loads(strict.stdout)["errors"]
    assert (issue["code"], issue["resource"], issue["field"]) == (
        "W_CONFIG_TOOL_HINTS_DIFFER",
        "Tool/greet",
        "spec.exports[0].parameters",
    )
    assert "tool schema ./tools/greet.py:hello" in issue["suggestion"]
    no_imports = run_cli("validate", "--strict", "--no-handlers", cwd=tmp_path)
    assert no_imports.returncode == 0, no_imports.stderr


def test_a_tool_handler_answers_in_a_real_run_and_refuses_what_its_hints_refuse(
    tmp_path: Path,
) -> None:
    write_bundle(tmp_path)
    done = run_cli("run", "goondan.yaml", "--input", "greet Ada 2 times", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["output"] == "HELLO, ADA! HELLO, ADA!"

    # The YAML lets times 0 through; the handler's hint (ge=1) does not.
    refused = run_cli("run", "goondan.yaml", "--input", "greet Ada 0 times", "--json", cwd=tmp_path)
    assert refused.returncode == 0, refused.stderr
    output = json.loads(refused.stdout)["output"]
    assert output.startswith("ERROR E_TOOL_INVALID_ARGS: Invalid arguments: ")
    assert "args.times: Input should be greater than or equal to 1" in output
