"""What the SDK-backed providers share: API keys, and SDK errors turned into ModelCallErrors.

The official ``openai`` and ``anthropic`` SDKs raise the same family of exceptions
(``AuthenticationError``, ``RateLimitError``, ``APIStatusError``, ``APIConnectionError``,
``APIError``), so one translation serves both.
"""

from __future__ import annotations

import email.utils
import importlib
import json
import math
import os
import random
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


def client_options(plan: ModelPlan, api_key: str) -> dict[str, Any]:
    """The options both SDKs' async clients take, from the Model's plan."""
    return {
        "api_key": api_key,
        "base_url": plan.base_url,
        "timeout": plan.timeout_seconds,
        # With shared limits the governor retries a 429 itself, after the pool's pause.
        "max_retries": 0 if plan.limits is not None else plan.max_retries,
    }


@asynccontextmanager
async def sdk_errors(sdk: ModuleType, plan: ModelPlan, key_source: str) -> AsyncIterator[None]:
    """Turn what the SDK raises (after its own retries) into a :class:`ModelCallError` with a code."""
    try:
        yield
    except (sdk.APIError, ValueError) as exc:  # ValueError: an unparsable response body
        raise _call_error(sdk, exc, f"Model/{plan.name}", key_source) from None


_SDK_ERRORS = (
    ("AuthenticationError", DeliveryCode.E_MODEL_AUTH, "the API rejected the key from {source} (HTTP {status})"),
    ("RateLimitError", RATE_LIMITED, "rate limited after retries (HTTP {status})"),
    ("APIStatusError", DeliveryCode.E_MODEL_API, "API error HTTP {status}: {message}"),
    ("APIConnectionError", DeliveryCode.E_MODEL_CONNECTION, "cannot reach the API: {text}"),
)  # fmt: skip
"""The SDK's exception classes, most specific first, each with its code and message."""
_INVALID_RESPONSE = ("", DeliveryCode.E_MODEL_API, "invalid API response: {text}")


def _call_error(sdk: ModuleType, exc: Exception, name: str, key_source: str) -> ModelCallError:
    """The :class:`ModelCallError` of ``exc``, which the SDK of ``name`` raised."""
    row = next(
        (row for row in _SDK_ERRORS if isinstance(exc, getattr(sdk, row[0]))), _INVALID_RESPONSE
    )
    return _error_of(
        row,
        name,
        source=key_source,
        status=getattr(exc, "status_code", None),
        message=str(getattr(exc, "message", "")),
        text=str(exc),
        response=getattr(exc, "response", None),
    )


def _error_of(
    row: tuple[str, str, str],
    name: str,
    *,
    source: str = "",
    status: int | None = None,
    message: str = "",
    text: str = "",
    response: Any = None,
) -> ModelCallError:
    _, code, template = row
    said = template.format(source=source, status=status, message=_short(message), text=_short(text))
    waits = retry_after(response) if code == RATE_LIMITED else None
    return ModelCallError(f"{name}: {said}", code=code, retry_after=waits)


def status_error(
    name: str, key_source: str, status: int, body: bytes, headers: Mapping[str, str]
) -> ModelCallError:
    """The error of an HTTP error answer, as :func:`sdk_errors` words the SDK's: the message
    is ``Error code: STATUS``, then `` - MESSAGE`` when the body's JSON says one."""
    message = f"Error code: {status}"
    try:
        data = json.loads(body.decode(errors="replace").strip())
    except ValueError:
        pass
    else:
        error = data.get("error", data) if isinstance(data, dict) else None
        said = error.get("message") if isinstance(error, dict) else None
        if isinstance(said, str) and said:
            message += f" - {said}"
    kind = {401: "AuthenticationError", 429: "RateLimitError"}.get(status, "APIStatusError")
    row = next(row for row in _SDK_ERRORS if row[0] == kind)
    return _error_of(
        row, name, source=key_source, status=status, message=message, response=_Head(headers)
    )


def connection_error(name: str, timed_out: bool) -> ModelCallError:
    """The error of a call whose connection failed or timed out (the SDK's words)."""
    text = "Request timed out." if timed_out else "Connection error."
    return _error_of(_SDK_ERRORS[-1], name, text=text)


def invalid_response(name: str, text: str) -> ModelCallError:
    """The error of an answer that is not what the API answers."""
    return _error_of(_INVALID_RESPONSE, name, text=text)


class _Head:
    """Headers where :func:`retry_after` looks for them."""

    __slots__ = ("headers",)

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers


MAX_SDK_RETRY_AFTER = 120.0
"""The SDKs honour a server's ``retry-after`` up to two minutes (and do not retry beyond)."""
INITIAL_RETRY_DELAY, MAX_RETRY_DELAY = 0.5, 8.0
"""The SDKs' exponential backoff: 0.5 s doubling per retry, at most 8 s, less 0-25% jitter."""


def should_retry(status: int, headers: Mapping[str, str]) -> bool:
    """Whether the SDKs retry an answer of ``status``: ``x-should-retry`` decides when the
    server sends it; else 408, 409, 429 and 5xx are retried, unless ``retry-after`` asks for
    more than two minutes."""
    waits = _server_delay(headers)
    if waits is not None and math.isfinite(waits) and waits > MAX_SDK_RETRY_AFTER:
        return False
    said = headers.get("x-should-retry")
    if said in ("true", "false"):
        return said == "true"
    return status in (408, 409, 429) or status >= 500


def retry_delay(retries_taken: int, headers: Mapping[str, str] | None) -> float:
    """Seconds before retry number ``retries_taken + 1``, as the SDKs wait."""
    waits = _server_delay(headers) if headers is not None else None
    if waits is not None and math.isfinite(waits) and 0 < waits <= MAX_SDK_RETRY_AFTER:
        return waits
    backoff = min(INITIAL_RETRY_DELAY * 2.0 ** min(retries_taken, 1000), MAX_RETRY_DELAY)
    return max(backoff * (1 - 0.25 * random.random()), 0.0)


def _server_delay(headers: Mapping[str, str]) -> float | None:
    """``retry-after-ms`` or ``retry-after`` (seconds, or an HTTP date) in seconds."""
    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if math.isinf(delay) and value.strip().lower() not in (
            "inf",
            "+inf",
            "infinity",
            "+infinity",
        ):
            return MAX_SDK_RETRY_AFTER + 1
        return delay / divisor
    try:
        parsed = email.utils.parsedate_tz(headers.get("retry-after"))
        if parsed is None:
            return None
        return float(email.utils.mktime_tz(parsed) - time.time())
    except (TypeError, ValueError, OverflowError, OSError):
        return None


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
