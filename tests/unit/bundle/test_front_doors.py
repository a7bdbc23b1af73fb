"""``Agent.spec.description`` and ``expose`` with ``Swarm.spec.expose``: what reaches the
agent's plan (the description callers see, the front doors that show it) and what is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from bundle import BundleError, load_bundle

CONFIG = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec:
  provider: scripted
  model: rules
  script: {{rules: [{{reply: hi}}]}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: front}}
spec:
  description: Answers questions about the weather.
  modelConfig: {{modelRef: Model/m}}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: back}}
spec:
  modelConfig: {{modelRef: Model/m}}
{back_expose}---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/front
  agents: [Agent/front, Agent/back]
{swarm_expose}"""


def write(tmp_path: Path, back_expose: str = "", swarm_expose: str = "") -> Path:
    path = tmp_path / "goondan.yaml"
    back = f"  expose: {back_expose}\n" if back_expose else ""
    swarm = f"  expose: {swarm_expose}\n" if swarm_expose else ""
    path.write_text(CONFIG.format(back_expose=back, swarm_expose=swarm))
    return path


def doors(tmp_path: Path, **written: str) -> tuple[list[str], list[str]]:
    bundle = load_bundle(write(tmp_path, **written))
    state = tmp_path / "state"
    front, back = (bundle.agent_plan(name, state) for name in ("front", "back"))
    return list(front.front_doors), list(back.front_doors)


def test_the_description_reaches_the_plan(tmp_path: Path) -> None:
    bundle = load_bundle(write(tmp_path))
    assert bundle.agent_plan("front", tmp_path).description == (
        "Answers questions about the weather."
    )
    assert bundle.agent_plan("back", tmp_path).description is None


def test_every_door_shows_every_agent_by_default(tmp_path: Path) -> None:
    every = ["openai", "mcp", "a2a", "agUi"]
    assert doors(tmp_path) == (every, every)


def test_a_swarm_list_narrows_one_door_and_an_agent_list_its_own(tmp_path: Path) -> None:
    shown = doors(tmp_path, back_expose="[mcp, a2a]", swarm_expose="{mcp: [front], agUi: []}")
    assert shown == (["openai", "mcp", "a2a"], ["a2a"])


def test_an_empty_agent_list_hides_it_from_every_door(tmp_path: Path) -> None:
    assert doors(tmp_path, back_expose="[]")[1] == []


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ({"swarm_expose": "{mcp: [ghost]}"}, "expose.mcp names 'ghost'"),
        ({"back_expose": "[telnet]"}, "expose"),
        ({"swarm_expose": "{smtp: [front]}"}, "smtp"),
    ],
)
def test_a_door_or_agent_that_is_not_there_is_refused(
    tmp_path: Path, written: dict[str, str], named: str
) -> None:
    with pytest.raises(BundleError) as caught:
        load_bundle(write(tmp_path, **written))
    assert named in str(caught.value)
