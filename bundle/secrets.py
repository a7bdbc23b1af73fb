"""Resolving ``value`` / ``valueFrom`` late, at first use, without ever printing the value."""

from __future__ import annotations

import os
from collections.abc import Mapping

from bundle.spec_base import SecretRef, ValueSource
from goondan.errors import ConfigCode, ConfigError
from goondan.secret_env import secret_env_names


class SecretUnavailable(ConfigError, LookupError):
    """A ``valueFrom`` reference points at nothing; the message names the variable, not a value."""

    code = ConfigCode.E_CONFIG_SECRET_UNAVAILABLE


class Secret:
    """A resolved secret: ``str()`` and ``repr()`` are masked; :meth:`reveal` gives the value."""

    __slots__ = ("_value", "source")

    def __init__(self, value: str, source: str) -> None:
        self._value = value
        self.source = source
        """Where it came from (``env:OPENAI_API_KEY``), safe to log."""

    def reveal(self) -> str:
        """The value itself: pass it to the SDK, never to a log."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.source}, '********')"

    __str__ = __repr__


def resolve_value(
    source: ValueSource, environ: Mapping[str, str] | None = None, *, field: str = "value"
) -> Secret:
    """The value of ``source`` (from the environment for ``valueFrom``)."""
    env = os.environ if environ is None else environ
    if source.value is not None:
        return Secret(source.value, "value")
    assert source.value_from is not None
    if source.value_from.env is not None:
        name = source.value_from.env
        value = env.get(name, "")
        if not value:
            raise SecretUnavailable(f"environment variable {name} is not set or empty")
        return Secret(value, f"env:{name}")
    ref = source.value_from.secret_ref
    assert ref is not None
    candidates = secret_candidates(ref, field)
    for name in candidates:
        if env.get(name):
            return Secret(env[name], f"env:{name}")
    raise SecretUnavailable(f"secret {ref.ref} is not set: define one of {', '.join(candidates)}")


def secret_candidates(ref: SecretRef, field: str = "value") -> list[str]:
    """The environment variables ``ref`` is read from, in the order they are tried: for
    ``Secret/<name>`` with ``key``, ``GOONDAN_SECRET_<NAME>_<KEY>`` first, then the field's
    name in place of the key, then the name alone, then the same without ``GOONDAN_``."""
    kind, _, secret = ref.ref.partition("/")
    if kind != "Secret" or not secret:
        raise SecretUnavailable(f"secretRef {ref.ref!r} must look like 'Secret/<name>'")
    return secret_env_names(secret, ref.key, field)
