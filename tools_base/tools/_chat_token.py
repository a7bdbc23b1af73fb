"""The chat tools' bot token: where the config says it comes from, read at call time, and
masked wherever it could show (see :mod:`tools_base.tools._chat` for the rules)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from goondan.errors import ToolCode
from goondan.secret_env import secret_env_names
from tools_base import JsonValue, ToolConfigError, ToolError

REDACTED = "[REDACTED]"
TOKEN_MISSING = ToolCode.E_CHAT_TOKEN_MISSING

_TOKEN_CHARS = re.compile(r"^[\x21-\x7e]+$")


@dataclass(frozen=True, slots=True)
class TokenSource:
    """Where a configured token comes from; :meth:`resolve` reads it at call time."""

    value: str | None = None
    env: str | None = None
    secret: str | None = None
    """The ``<name>`` of ``secretRef.ref: Secret/<name>``."""
    key: str | None = None

    def candidates(self) -> list[str]:
        """Environment variables tried, in order (the rule of ``bundle.secrets``)."""
        if self.env is not None:
            return [self.env]
        if self.secret is None:
            return []
        return secret_env_names(self.secret, self.key, "token")


def parse_token_source(tool: str, raw: JsonValue) -> TokenSource:
    """The config ``token`` (a value source object); raises ``ToolConfigError``."""
    problem, found = _token_source(raw)
    if found is None:
        # Never echo the value: a literal token may be in it.
        raise ToolConfigError(
            f"{tool} config 'token' {problem}; use {{valueFrom: {{env: NAME}}}}, "
            "{valueFrom: {secretRef: {ref: Secret/<name>, key: <key>}}} or {value: ...}"
        )
    return found


_Parsed = tuple[str, TokenSource | None]
"""A parsed source, or what is wrong with the config (and ``None``)."""


def _token_source(raw: JsonValue) -> _Parsed:
    if not isinstance(raw, dict):
        return "must be an object", None
    if set(raw) - {"value", "valueFrom"} or len(raw) != 1:
        return "needs exactly one of 'value' or 'valueFrom'", None
    if "value" not in raw:
        return _value_from(raw["valueFrom"])
    value = raw["value"]
    if not isinstance(value, str) or not value:
        return "'value' must be a non-empty string", None
    return "", TokenSource(value=value)


def _value_from(source: JsonValue) -> _Parsed:
    if not isinstance(source, dict) or len(source) != 1 or set(source) - {"env", "secretRef"}:
        return "'valueFrom' needs exactly one of 'env' or 'secretRef'", None
    if "env" not in source:
        return _secret_ref(source["secretRef"])
    env = source["env"]
    if not isinstance(env, str) or not env:
        return "'valueFrom.env' must name an environment variable", None
    return "", TokenSource(env=env)


def _secret_ref(ref: JsonValue) -> _Parsed:
    """The source a ``secretRef`` names, or what is wrong with it."""
    if not isinstance(ref, dict) or set(ref) - {"ref", "key"}:
        return "'valueFrom.secretRef' must be {ref, key}", None
    kind, _, name = str(ref.get("ref", "")).partition("/")
    key = ref.get("key")
    if kind != "Secret" or not name.strip() or "/" in name:
        return "'valueFrom.secretRef.ref' must look like 'Secret/<name>'", None
    if key is not None and (not isinstance(key, str) or not key):
        return "'valueFrom.secretRef.key' must be a non-empty string", None
    return "", TokenSource(secret=name, key=key)


def resolve_token(
    tool: str,
    configured: TokenSource | None,
    env_names: tuple[str, ...],
    environ: Mapping[str, str] | None = None,
) -> str:
    """The bot token: the configured source, else the first non-empty of ``env_names``."""
    env = os.environ if environ is None else environ
    if configured is not None:
        token = _configured_token(tool, configured, env)
    else:
        token = _first_set(tool, env_names, env)
    token = token.strip()
    if not _TOKEN_CHARS.match(token):
        # The token goes into a URL or a header; http.client would quote it back in its error.
        raise ToolError(
            f"[{tool}] the bot token contains spaces or control characters",
            code=TOKEN_MISSING,
            suggestion="Ask the operator to fix the bot token.",
        )
    return token


def _configured_token(tool: str, configured: TokenSource, env: Mapping[str, str]) -> str:
    if configured.value is not None:
        return configured.value
    names = configured.candidates()
    token = next((env[n] for n in names if env.get(n)), None)
    if token is None:
        raise _missing(f"[{tool}] the configured token is not set: define {' or '.join(names)}")
    return token


def _first_set(tool: str, env_names: tuple[str, ...], env: Mapping[str, str]) -> str:
    token = next((env[n] for n in env_names if env.get(n)), None)
    if token is None:
        raise _missing(
            f"[{tool}] no bot token: set one of {', '.join(env_names)} or the Tool config 'token'"
        )
    return token


def _missing(message: str) -> ToolError:
    return ToolError(
        message,
        code=TOKEN_MISSING,
        suggestion="Ask the operator to set the bot token; do not retry until then.",
    )


def redact(text: str, secret: str) -> str:
    """``text`` with every occurrence of ``secret`` (and its URL-quoted form) masked."""
    if not secret:
        return text
    from urllib.parse import quote

    for form in {secret, quote(secret, safe=""), quote(secret, safe=":")}:
        text = text.replace(form, REDACTED)
    return text
