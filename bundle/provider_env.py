"""The environment variables a provider's SDK reads on its own (names only, never values).

A leaf module: both the keys a swarm needs (:mod:`bundle.keys`, over a whole bundle) and the
environment a process is given (:mod:`bundle.environment`, which a bundle is built with) read it.
"""

from __future__ import annotations

PROVIDER_KEY_ENV = {
    "openai": "OPENAI_API_KEY",
    "anthropic": "ANTHROPIC_API_KEY",
    # google-genai also reads GOOGLE_API_KEY; one name keeps `doctor` and the agents' own
    # environments in step (a Model can still name GOOGLE_API_KEY in apiKey.valueFrom.env).
    "google": "GEMINI_API_KEY",
}
"""The variable a provider's SDK reads when the Model names no ``apiKey``."""
PROVIDER_SETTINGS_ENV = {
    "openai": ("OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"),
    "anthropic": ("ANTHROPIC_BASE_URL",),
    "google": ("GOOGLE_GEMINI_BASE_URL", "GOOGLE_GENAI_API_VERSION"),
}
"""Variables a provider's SDK reads besides the key (where to call, on whose account); the
base URL's only when the Model names no ``baseUrl``, which the SDK takes instead."""
