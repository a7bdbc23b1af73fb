"""The Tool Registry in a real agent process: every bundle Tool, duplicates merged, the catalog."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from orchestrator.daemon import Orchestrator

pytestmark = pytest.mark.timeout(120)

OFFER = """
def register(api):
    async def offer(ctx):
        # Offer a registry tool the agent does not list, on demand.
        if any("offer json" in (m.content or "") for m in ctx.messages[-1:]):
            ctx.tool_catalog.extend(i for i in api.tools.list() if i.name == "json-query__query")
        return await ctx.next()

    api.pipeline.register("step", offer)
"""

SWARM = """\
apiVersion: goondan.ai/v1
kind: Extension
metadata: {name: offer}
spec: {entry: ./offer.py}
---
apiVersion: goondan.ai/v1
kind: Model
metadata: {name: brain}
spec:
  provider: scripted
  model: rules
  script:
    rules:
      - when: {input: "^offer json$"}
        call: {tool: json-query__query, args: {data: '{{"a": 7}}', path: a}}
      - when: {input: "^json$"}
        call: {tool: json-query__query, args: {data: '{{"a": 7}}', path: a}}
      - when: {input: "^wait$"}
        call: {tool: wait__wait, args: {seconds: 0}}
      - when: {toolResult: wait__wait}
        reply: "waited {result.waitedMs} ms"
      - when: {status: ok}
        reply: "ok {result.value}"
      - when: {status: error}
        reply: "ERROR {errorCode}"
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {name: solo}
spec:
  modelConfig: {modelRef: Model/brain}
  extensions: [Extension/offer]
  tools:
    - {ref: {kind: Tool, name: wait, package: "@goondan/base"}}
    - {ref: {kind: Tool, name: wait, package: "@goondan/base"}, config: {}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {name: default}
spec:
  entryAgent: Agent/solo
  agents: [Agent/solo]
"""


async def test_duplicate_tools_boot_and_step_middleware_offers_any_registry_tool(
    tmp_path: Path,
) -> None:
    (tmp_path / "offer.py").write_text(OFFER)
    (tmp_path / "goondan.yaml").write_text(SWARM)
    orchestrator = Orchestrator.from_bundle(tmp_path / "goondan.yaml", state_dir=tmp_path / "state")
    async with asyncio.timeout(30):
        await orchestrator.start()
    try:
        async with asyncio.timeout(30):
            waited = await orchestrator.request("wait")
            refused = await orchestrator.request("json")
            offered = await orchestrator.request("offer json")
        assert waited.output == "waited 0 ms", waited
        assert refused.output == "ERROR E_TOOL_NOT_IN_CATALOG", refused
        assert offered.output == "ok 7"
    finally:
        async with asyncio.timeout(60):
            await orchestrator.shutdown()
