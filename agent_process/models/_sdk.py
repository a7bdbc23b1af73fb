"""What the SDK-backed providers share: API keys, and SDK errors turned into ModelCallErrors.

The official ``openai`` and ``anthropic`` SDKs raise the same family of exceptions
(``AuthenticationError``, ``RateLimitError``, ``APIStatusError``, ``APIConnectionError``,
``APIError``), so one translation serves both.
"""

from __future__ import annotations

import email.utils
import importlib
import os
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

from agent_process.models.base import RATE_LIMITED, ModelCallError
from bundle.plan import ModelPlan
from bundle.secrets import SecretUnavailable, resolve_value
from goondan.errors import DeliveryCode


class ProviderUnavailable(ModelCallError):
    """The provider's SDK is not installed."""

    code = DeliveryCode.E_MODEL_PROVIDER_UNAVAILABLE


def import_sdk(name: str, provider: str, extra: str | None = None) -> ModuleType:
    """The SDK module (``name`` may be dotted), or a clear error naming the extra that
    installs it (``extra``, by default ``name``)."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise ProviderUnavailable(
            f"provider {provider!r} needs the {name} SDK: pip install 'goondan-py[{extra or name}]'"
        ) from exc


def resolve_api_key(
    plan: ModelPlan, default_env: str, environ: Mapping[str, str] | None = None
) -> tuple[str | None, str]:
    """``(key, where it comes from)``; the key is ``None`` when nothing provides one."""
    env = os.environ if environ is None else environ
    if plan.api_key is not None:
        try:
            secret = resolve_value(plan.api_key, env, field="apiKey")
        except SecretUnavailable as exc:
            return None, str(exc)
        return secret.reveal(), secret.source
    value = env.get(default_env, "")
    return (value or None), f"env:{default_env}"


def missing_key_error(plan: ModelPlan, key_source: str) -> ModelCallError:
    """The error of a call made without any API key."""
    where = key_source.removeprefix("env:")
    return ModelCallError(
        f"Model/{plan.name}: no API key: set {where} (or apiKey.valueFrom.env in the Model)",
        code=DeliveryCode.E_MODEL_AUTH,
    )


@asynccontextmanager
async def sdk_errors(sdk: ModuleType, plan: ModelPlan, key_source: str) -> AsyncIterator[None]:
    """Turn what the SDK raises (after its own retries) into a :class:`ModelCallError` with a code."""
    name = f"Model/{plan.name}"
    try:
        yield
    except sdk.AuthenticationError as exc:
        raise ModelCallError(
            f"{name}: the API rejected the key from {key_source} (HTTP {exc.status_code})",
            code=DeliveryCode.E_MODEL_AUTH,
        ) from None
    except sdk.RateLimitError as exc:
        raise ModelCallError(
            f"{name}: rate limited after retries (HTTP {exc.status_code})",
            code=RATE_LIMITED,
            retry_after=retry_after(getattr(exc, "response", None)),
        ) from None
    except sdk.APIStatusError as exc:
        raise ModelCallError(
            f"{name}: API error HTTP {exc.status_code}: {_short(exc.message)}",
            code=DeliveryCode.E_MODEL_API,
        ) from None
    except sdk.APIConnectionError as exc:
        raise ModelCallError(
            f"{name}: cannot reach the API: {_short(str(exc))}",
            code=DeliveryCode.E_MODEL_CONNECTION,
        ) from None
    except (sdk.APIError, ValueError) as exc:  # ValueError: an unparsable response body
        raise ModelCallError(
            f"{name}: invalid API response: {_short(str(exc))}", code=DeliveryCode.E_MODEL_API
        ) from None


MAX_RETRY_AFTER_SECONDS = 600.0
"""A longer ``retry-after`` is taken as this (a pool paused for hours helps nobody)."""


def retry_after(response: Any) -> float | None:
    """Seconds a 429 response asks to wait: ``retry-after-ms`` (OpenAI), else ``retry-after``
    in seconds or as an HTTP date; ``None`` when it says nothing usable."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    seconds: float | None = None
    try:
        if headers.get("retry-after-ms"):
            seconds = float(headers["retry-after-ms"]) / 1000
        elif headers.get("retry-after"):
            value = headers["retry-after"]
            try:
                seconds = float(value)
            except ValueError:
                when = email.utils.parsedate_to_datetime(value)
                seconds = when.timestamp() - time.time()
    except (TypeError, ValueError, OverflowError):
        return None
    if seconds is None or seconds != seconds or seconds < 0:  # NaN or in the past
        return None
    return min(seconds, MAX_RETRY_AFTER_SECONDS)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
