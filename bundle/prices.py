"""What a Model's tokens cost: its own ``pricing``, else the genai-prices catalogue.

A Model that declares ``spec.pricing`` is priced by it, always. One that does not is looked up by
provider and model name in the price data that ships inside the ``genai-prices`` package (prices
of OpenAI, Anthropic, Google and many more, with their long-context tiers). The lookup is
offline: nothing here starts genai-prices' price updater, the only part of it that fetches, so
the prices are those of the installed release. A Model found in neither costs nothing on the
books (``cost`` 0, no ``cost`` on its calls), as before the catalogue was consulted.

How a Model is found in the catalogue:

* the ``scripted`` provider never is (it calls no paid model);
* with a ``baseUrl``, the catalogue first matches the URL against the providers' API addresses
  (Groq, OpenRouter, Together, ...) and looks the model up there only;
* otherwise, and for a URL the catalogue does not know (a proxy or gateway in front of the
  provider), under the Model's ``provider``.

A Model served for free (a local server) under a catalogued name declares ``pricing`` of 0.

The catalogue comes with the provider extras (``openai``, ``anthropic``, ``google``; alone:
``prices``), the only ones whose Models have a price: the core install, which runs the
``scripted`` provider, does without it. A Model without ``pricing`` looked up where it is not
installed has no price, and a warning names the extra that installs it.
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import structlog

if TYPE_CHECKING:
    from bundle.spec_agent import ModelPricing

PriceSource = Literal["model", "genai-prices"]
"""Where a Model's price comes from: its ``spec.pricing`` or the genai-prices catalogue."""

CATALOGUE: PriceSource = "genai-prices"
UNCATALOGUED_PROVIDERS = frozenset({"scripted"})
CATALOGUE_EXTRA = "pip install 'goondan-py[prices]'"
"""What installs the catalogue (every provider extra does too)."""

log = structlog.get_logger("goondan.prices")


class PricedModel(Protocol):
    """What a price is looked up by: a Model's spec or its plan."""

    @property
    def provider(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def pricing(self) -> ModelPricing | None: ...


@dataclass(frozen=True, slots=True)
class DeclaredPrice:
    """The Model's own ``pricing``."""

    pricing: ModelPricing
    source: PriceSource = "model"

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The price of one call's tokens."""
        return self.pricing.cost(input_tokens, output_tokens)


@dataclass(frozen=True, slots=True)
class CataloguePrice:
    """A price from genai-prices: ``model`` as listed by provider ``provider_id`` there."""

    provider_id: str
    model: str
    source: PriceSource = CATALOGUE

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """The price of one call's tokens, at today's rate and the tier their count falls in."""
        from genai_prices import Usage, calc_price

        usage = Usage(input_tokens=input_tokens, output_tokens=output_tokens)
        return float(calc_price(usage, self.model, provider_id=self.provider_id).total_price)


ModelPrice = DeclaredPrice | CataloguePrice


def model_price(model: PricedModel, base_url: str | None = None) -> ModelPrice | None:
    """The price of ``model``'s calls, or ``None`` when neither it nor the catalogue has one.

    ``base_url`` is the Model's ``baseUrl`` (or ``endpoint``), if it has one.
    """
    if model.pricing is not None:
        return DeclaredPrice(model.pricing)
    return catalogue_price(model.provider, model.model, base_url)


@functools.lru_cache(maxsize=256)
def catalogue_price(
    provider: str, model: str, base_url: str | None = None
) -> CataloguePrice | None:
    """``model`` of ``provider`` in the genai-prices catalogue (see the module docstring).

    The catalogue is imported on the first lookup only: a swarm whose Models all declare a
    price, or run scripted, never loads it.
    """
    if provider.lower() in UNCATALOGUED_PROVIDERS:
        return None
    if not catalogue_installed():
        log.warning(
            "model has no price: the genai-prices catalogue is not installed",
            provider=provider,
            model=model,
            fix=f"{CATALOGUE_EXTRA}, or give the Model spec.pricing",
        )
        return None
    from genai_prices.data_snapshot import get_snapshot

    snapshot = get_snapshot()
    if base_url:
        try:
            hosted_by = snapshot.find_provider(None, None, base_url)
        except LookupError:
            pass  # an address the catalogue does not know: priced as the provider's own
        else:
            found = hosted_by.find_model(model.lower(), all_providers=snapshot.providers)
            return None if found is None else CataloguePrice(hosted_by.id, model)
    try:
        listed_by, _ = snapshot.find_provider_model(model, None, provider, None)
    except LookupError:
        return None
    return CataloguePrice(listed_by.id, model)


def catalogue_installed() -> bool:
    """Whether the genai-prices catalogue can be imported (looked up, not imported)."""
    try:
        return importlib.util.find_spec("genai_prices") is not None
    except (ImportError, ValueError):
        return False
