"""The environment variables a ``secretRef`` is read from: one rule for the bundle's value
sources and for the tools that resolve their own token at call time."""

from __future__ import annotations

import re


def env_name_part(text: str) -> str:
    """``text`` as a part of an environment variable's name: runs of anything but ASCII letters
    and digits become ``_``, the ends trimmed, upper case (``my-bot.token`` → ``MY_BOT_TOKEN``)."""
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_").upper()


def secret_env_names(secret: str, key: str | None, field: str) -> list[str]:
    """The variables ``Secret/<secret>`` (with ``key``, read for ``field``) is looked up in, in
    the order they are tried: ``GOONDAN_SECRET_<SECRET>_<KEY>``, the field's name in place of the
    key, the secret's name alone, then the same three without ``GOONDAN_``; no name twice."""
    s, k, f = env_name_part(secret), env_name_part(key or field), env_name_part(field)
    names = [
        f"GOONDAN_SECRET_{s}_{k}",
        f"GOONDAN_SECRET_{s}_{f}",
        f"GOONDAN_SECRET_{s}",
        f"SECRET_{s}_{k}",
        f"SECRET_{s}_{f}",
        f"SECRET_{s}",
    ]
    return list(dict.fromkeys(names))


NATS_USER_ENV = "GOONDAN_NATS_USER"
NATS_PASSWORD_ENV = "GOONDAN_NATS_PASSWORD"
NATS_TOKEN_ENV = "GOONDAN_NATS_TOKEN"
NATS_CREDENTIAL_ENVS = (NATS_USER_ENV, NATS_PASSWORD_ENV, NATS_TOKEN_ENV)
"""The cluster's NATS user information: the daemon reads them and hands them to each agent
process, which takes them out of its environment once read (tools never see them)."""
