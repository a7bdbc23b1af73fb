"""Model prices end to end: agents on the ``openai`` provider (the official SDK) call a local
Chat Completions server; the daemon's usage book shows each call priced by the Model's own
``pricing``, by the genai-prices catalogue, or not at all.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from genai_prices import Usage as CatalogueUsage
from genai_prices import calc_price

from orchestrator.daemon import Orchestrator
from tests.support.daemon import run_cli
from tests.support.model_server import ModelServer, text_reply
from tests.support.wire_server import Reply

pytestmark = pytest.mark.timeout(120)

PROMPT_TOKENS, COMPLETION_TOKENS = 20_000, 4_000


def model_doc(name: str, url: str, model: str, extra: str = "") -> str:
    return f"""\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: {name}}}
spec:
  provider: openai
  model: {model}
  baseUrl: {url}
  apiKey: {{value: sk-local}}
  limits: {{maxConcurrent: 4}}
{extra}"""


def agent_doc(name: str, model: str, extra: str = "") -> str:
    return f"""\
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: {name}}}
spec:
  modelConfig: {{modelRef: Model/{model}}}
  prompt: {{system: "You are {name}."}}
{extra}"""


SWARM = """\
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: s}
spec:
  entryAgent: Agent/catalogued
  agents: [Agent/catalogued, Agent/declared, Agent/unknown]
"""


@asynccontextmanager
async def running(tmp_path: Path, text: str) -> AsyncIterator[Orchestrator]:
    path = tmp_path / "goondan.yaml"
    path.write_text(text)
    orchestrator = Orchestrator.from_bundle(path, state_dir=tmp_path / "state")
    await orchestrator.start()
    try:
        yield orchestrator
    finally:
        await orchestrator.shutdown()


async def test_calls_are_priced_by_pricing_else_the_catalogue(tmp_path: Path) -> None:
    def answer(agent: str, body: dict[str, Any]) -> Reply:
        return text_reply("fine", prompt_tokens=PROMPT_TOKENS, completion_tokens=COMPLETION_TOKENS)

    with ModelServer(answer) as server:
        docs = [
            model_doc("catalogued", server.url, "gpt-4o"),
            model_doc(
                "declared",
                server.url,
                "gpt-4o",
                "  pricing: {inputPerMillionTokens: 1, outputPerMillionTokens: 2}\n",
            ),
            model_doc("unknown", server.url, "no-such-model-anywhere"),
            # A cost ceiling on a Model without pricing validates: the catalogue prices it.
            agent_doc("catalogued", "catalogued", "  budgets:\n    instance: {cost: 5}\n"),
            agent_doc("declared", "declared"),
            agent_doc("unknown", "unknown"),
            SWARM,
        ]
        async with running(tmp_path, "---\n".join(docs)) as orchestrator:
            for agent in ("catalogued", "declared", "unknown"):
                done = await orchestrator.request("go", agent=agent)
                assert done.output == "fine", done.error
            state = str(orchestrator.state_dir)
            usage = await asyncio.to_thread(
                run_cli, "usage", "--state-dir", state, "--json", cwd=tmp_path
            )
    assert usage.returncode == 0, usage.stderr
    report = json.loads(usage.stdout)
    costs = {row["agent"]: row["usage"]["cost"] for row in report["agents"]}
    sources = {row["agent"]: row["priceSource"] for row in report["agents"]}
    assert sources == {"catalogued": "genai-prices", "declared": "model", "unknown": None}
    usage = CatalogueUsage(input_tokens=PROMPT_TOKENS, output_tokens=COMPLETION_TOKENS)
    catalogued = float(calc_price(usage, "gpt-4o", provider_id="openai").total_price)
    assert catalogued > 0
    assert costs == {
        "catalogued": pytest.approx(catalogued),
        "declared": pytest.approx((PROMPT_TOKENS * 1 + COMPLETION_TOKENS * 2) / 1_000_000),
        "unknown": 0.0,
    }
