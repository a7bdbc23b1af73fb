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

    def bad(detail: str) -> ToolConfigError:
        # Never echo the value: a literal token may be in it.
        return ToolConfigError(
            f"{tool} config 'token' {detail}; use {{valueFrom: {{env: NAME}}}}, "
            "{valueFrom: {secretRef: {ref: Secret/<name>, key: <key>}}} or {value: ...}"
        )

    if not isinstance(raw, dict):
        raise bad("must be an object")
    if set(raw) - {"value", "valueFrom"} or len(raw) != 1:
        raise bad("needs exactly one of 'value' or 'valueFrom'")
    if "value" in raw:
        value = raw["value"]
        if not isinstance(value, str) or not value:
            raise bad("'value' must be a non-empty string")
        return TokenSource(value=value)
    source = raw["valueFrom"]
    if not isinstance(source, dict) or len(source) != 1 or set(source) - {"env", "secretRef"}:
        raise bad("'valueFrom' needs exactly one of 'env' or 'secretRef'")
    if "env" in source:
        env = source["env"]
        if not isinstance(env, str) or not env:
            raise bad("'valueFrom.env' must name an environment variable")
        return TokenSource(env=env)
    ref = source["secretRef"]
    if not isinstance(ref, dict) or set(ref) - {"ref", "key"}:
        raise bad("'valueFrom.secretRef' must be {ref, key}")
    kind, _, name = str(ref.get("ref", "")).partition("/")
    key = ref.get("key")
    if kind != "Secret" or not name.strip() or "/" in name:
        raise bad("'valueFrom.secretRef.ref' must look like 'Secret/<name>'")
    if key is not None and (not isinstance(key, str) or not key):
        raise bad("'valueFrom.secretRef.key' must be a non-empty string")
    return TokenSource(secret=name, key=key)


def resolve_token(
    tool: str,
    configured: TokenSource | None,
    env_names: tuple[str, ...],
    environ: Mapping[str, str] | None = None,
) -> str:
    """The bot token: the configured source, else the first non-empty of ``env_names``."""
    env = os.environ if environ is None else environ
    if configured is not None:
        if configured.value is not None:
            token: str | None = configured.value
        else:
            names = configured.candidates()
            token = next((env[n] for n in names if env.get(n)), None)
            if token is None:
                raise ToolError(
                    f"[{tool}] the configured token is not set: define {' or '.join(names)}",
                    code=TOKEN_MISSING,
                    suggestion="Ask the operator to set the bot token; do not retry until then.",
                )
    else:
        token = next((env[n] for n in env_names if env.get(n)), None)
        if token is None:
            raise ToolError(
                f"[{tool}] no bot token: set one of {', '.join(env_names)} "
                "or the Tool config 'token'",
                code=TOKEN_MISSING,
                suggestion="Ask the operator to set the bot token; do not retry until then.",
            )
    assert token is not None
    token = token.strip()
    if not _TOKEN_CHARS.match(token):
        # The token goes into a URL or a header; http.client would quote it back in its error.
        raise ToolError(
            f"[{tool}] the bot token contains spaces or control characters",
            code=TOKEN_MISSING,
            suggestion="Ask the operator to fix the bot token.",
        )
    return token


def redact(text: str, secret: str) -> str:
    """``text`` with every occurrence of ``secret`` (and its URL-quoted form) masked."""
    if not secret:
        return text
    from urllib.parse import quote

    for form in {secret, quote(secret, safe=""), quote(secret, safe=":")}:
        text = text.replace(form, REDACTED)
    return text
