"""A Model's price: its own ``pricing``, else the genai-prices catalogue, else none.

Expected costs are computed with genai-prices' own API, so a new release of its price data
changes both sides alike.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import structlog
import structlog.testing
from genai_prices import Usage as CatalogueUsage
from genai_prices import calc_price

from agent_process.governor import ModelGovernor
from agent_process.models.base import ModelRequest, ModelResponse, TokenUsage
from agent_process.scope import TurnScope
from bundle import load_bundle
from bundle.errors import BundleError
from bundle.plan import AgentPlan, ModelPlan
from bundle.prices import CataloguePrice, DeclaredPrice, catalogue_price, model_price
from bundle.spec_agent import Budgets, ModelPricing
from goondan.usage import Usage
from tools_base import Message


def expected(model: str, provider: str, input_tokens: int, output_tokens: int) -> float:
    usage = CatalogueUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    price: Decimal = calc_price(usage, model, provider_id=provider).total_price
    return float(price)


def model_plan(
    model: str, provider: str = "openai", pricing: ModelPricing | None = None, **more: Any
) -> ModelPlan:
    return ModelPlan(name="m", provider=provider, model=model, pricing=pricing, **more)


class Answers:
    """A chat model that answers every call with the same token usage."""

    def __init__(self, prompt: int, completion: int) -> None:
        self.usage = TokenUsage(prompt_tokens=prompt, completion_tokens=completion)

    async def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="ok", usage=self.usage)


async def one_call(tmp_path: Path, model: ModelPlan) -> tuple[TurnScope, ModelResponse]:
    plan = AgentPlan(
        swarm_name="s",
        entry_agent="worker",
        agents=["worker"],
        agent_name="worker",
        model=model,
        budgets=Budgets(),
        state_dir="/nonexistent",
    )
    turn = TurnScope(
        agent_name="worker",
        instance_key="default",
        turn_id="turn-1",
        trace_id="f" * 32,
        workdir=tmp_path,
        logger=structlog.get_logger(),
        events=lambda event: None,
        instance_usage=Usage(),
    )
    request = ModelRequest(messages=[Message(id="m1", role="user", content="hi")], tools=[])
    response = await ModelGovernor(plan).complete(Answers(12_000, 3_000), request, turn)
    return turn, response


async def test_a_model_without_pricing_is_priced_by_the_catalogue(tmp_path: Path) -> None:
    turn, response = await one_call(tmp_path, model_plan("gpt-4o"))
    cost = expected("gpt-4o", "openai", 12_000, 3_000)
    assert cost > 0
    assert turn.usage.cost == pytest.approx(cost)
    assert turn.instance_usage.cost == pytest.approx(cost)
    assert response.usage is not None
    assert response.usage.cost == pytest.approx(cost)


async def test_a_declared_pricing_wins_over_the_catalogue(tmp_path: Path) -> None:
    pricing = ModelPricing(input_per_million_tokens=1, output_per_million_tokens=2)
    turn, response = await one_call(tmp_path, model_plan("gpt-4o", pricing=pricing))
    assert turn.usage.cost == pytest.approx((12_000 * 1 + 3_000 * 2) / 1_000_000)
    assert turn.usage.cost != pytest.approx(expected("gpt-4o", "openai", 12_000, 3_000))
    assert response.usage is not None
    assert response.usage.cost == turn.usage.cost


async def test_a_model_the_catalogue_does_not_know_costs_nothing(tmp_path: Path) -> None:
    turn, response = await one_call(tmp_path, model_plan("no-such-model-anywhere"))
    assert turn.usage.cost == 0.0
    assert turn.usage.total_tokens == 15_000
    assert response.usage is not None
    assert response.usage.cost is None


def test_where_a_price_comes_from() -> None:
    pricing = ModelPricing(input_per_million_tokens=1, output_per_million_tokens=2)
    declared = model_price(model_plan("gpt-4o", pricing=pricing))
    assert isinstance(declared, DeclaredPrice)
    assert declared.source == "model"
    catalogued = model_price(model_plan("claude-sonnet-4-5", provider="anthropic"))
    assert catalogued == CataloguePrice("anthropic", "claude-sonnet-4-5")
    assert catalogued.source == "genai-prices"
    assert model_price(model_plan("gpt-4o", provider="scripted")) is None
    assert model_price(model_plan("llama3.1")) is None


def test_a_base_url_prices_by_the_provider_serving_there() -> None:
    # A proxy or local server the catalogue does not know: the provider's own price.
    local = catalogue_price("openai", "gpt-4o", "http://127.0.0.1:8080/v1")
    assert local == CataloguePrice("openai", "gpt-4o")
    # A known host prices by its own list: Groq serves no gpt-4o, and does serve this one.
    assert catalogue_price("openai", "gpt-4o", "https://api.groq.com/openai/v1") is None
    groq = catalogue_price("openai", "llama-3.3-70b-versatile", "https://api.groq.com/openai/v1")
    assert groq is not None
    assert groq.provider_id == "groq"
    assert groq.cost(10_000, 1_000) == pytest.approx(
        expected("llama-3.3-70b-versatile", "groq", 10_000, 1_000)
    )


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the price lookup went to the network")

    catalogue_price.cache_clear()
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    yield
    catalogue_price.cache_clear()


@pytest.mark.usefixtures("no_network")
def test_the_catalogue_is_read_offline() -> None:
    price = catalogue_price("google", "gemini-2.5-flash")
    assert price is not None
    assert price.cost(1_000, 1_000) == pytest.approx(
        expected("gemini-2.5-flash", "google", 1_000, 1_000)
    )


BUNDLE = """\
apiVersion: goondan.ai/v1
kind: Model
metadata: {{name: m}}
spec:
  provider: openai
  model: {model}
---
apiVersion: goondan.ai/v1
kind: Agent
metadata: {{name: a}}
spec:
  modelConfig: {{modelRef: Model/m}}
  budgets:
    instance: {{cost: 0.5}}
---
apiVersion: goondan.ai/v1
kind: Swarm
metadata: {{name: s}}
spec:
  entryAgent: Agent/a
  agents: [Agent/a]
"""


def test_a_cost_ceiling_accepts_a_model_the_catalogue_prices(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUNDLE.format(model="gpt-4o"))
    load_bundle(path)
    path.write_text(BUNDLE.format(model="no-such-model-anywhere"))
    with pytest.raises(BundleError) as refused:
        load_bundle(path)
    assert "a cost ceiling needs token prices, and Model/m has none" in str(refused.value)


@pytest.fixture
def no_catalogue(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """genai-prices as a core install has it: not installed (an import of it fails)."""
    catalogue_price.cache_clear()
    monkeypatch.setitem(sys.modules, "genai_prices", None)
    monkeypatch.setitem(sys.modules, "genai_prices.data_snapshot", None)
    yield
    catalogue_price.cache_clear()


@pytest.mark.usefixtures("no_catalogue")
def test_without_the_catalogue_a_model_has_no_price_and_a_warning_names_the_extra() -> None:
    with structlog.testing.capture_logs() as logs:
        assert catalogue_price("openai", "gpt-4o") is None
        assert model_price(model_plan("gpt-4o")) is None
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert warnings
    for warning in warnings:
        assert "pip install 'goondan-py[prices]'" in warning["fix"]
        assert (warning["provider"], warning["model"]) == ("openai", "gpt-4o")
    declared = ModelPricing(input_per_million_tokens=1.0, output_per_million_tokens=2.0)
    assert isinstance(model_price(model_plan("gpt-4o", pricing=declared)), DeclaredPrice)


@pytest.mark.usefixtures("no_catalogue")
def test_without_the_catalogue_a_cost_ceiling_names_the_extra(tmp_path: Path) -> None:
    path = tmp_path / "goondan.yaml"
    path.write_text(BUNDLE.format(model="gpt-4o"))  # priced when the catalogue is installed
    with pytest.raises(BundleError) as refused:
        load_bundle(path)
    assert "a cost ceiling needs token prices, and Model/m has none" in str(refused.value)
    assert "pip install 'goondan-py[prices]'" in str(refused.value)
