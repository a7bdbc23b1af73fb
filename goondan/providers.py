"""The model providers a Model may name, and the extra that installs each one's SDK.

One table read by both sides: ``validate`` (in ``bundle``) refuses what an agent process (in
``agent_process``) could not start, and both name the same ``pip install`` line.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

DISTRIBUTION = "goondan-py"
"""The name ``pip`` installs the runtime (and its extras) by."""


@dataclass(frozen=True, slots=True)
class Provider:
    """One value of ``Model.spec.provider``."""

    name: str
    module: str | None
    """The SDK's import name (``None``: nothing to install)."""
    extra: str | None
    """The optional dependency of :data:`DISTRIBUTION` that installs :attr:`module`."""
    sdk: str | None = None
    """The SDK's distribution name, for messages (``google-genai``)."""

    @property
    def install(self) -> str | None:
        """The command that installs the SDK, or ``None`` when there is none to install."""
        return f"pip install '{DISTRIBUTION}[{self.extra}]'" if self.extra else None


PROVIDERS: dict[str, Provider] = {
    provider.name: provider
    for provider in (
        Provider("scripted", None, None),
        Provider("openai", "openai", "openai", "openai"),
        Provider("anthropic", "anthropic", "anthropic", "anthropic"),
        Provider("google", "google.genai", "google", "google-genai"),
    )
}
"""Every provider an agent can start with, by lower-case name (names are case-insensitive)."""


def provider(name: str) -> Provider | None:
    """The provider called ``name`` (any case), or ``None`` when no agent could use it."""
    return PROVIDERS.get(name.lower())


def sdk_installed(provider: Provider) -> bool:
    """Whether the provider's SDK can be imported (looked up, not imported: importing an SDK
    costs a second and more)."""
    if provider.module is None:
        return True
    try:
        return importlib.util.find_spec(provider.module) is not None
    except (ImportError, ValueError):  # a missing parent package (``google``) raises
        return False


def known_names() -> str:
    """``scripted, openai, anthropic or google``, for messages."""
    names = list(PROVIDERS)
    return ", ".join(names[:-1]) + f" or {names[-1]}"
