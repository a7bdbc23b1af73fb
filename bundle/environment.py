"""Which environment variables each agent and connector process gets: names, never values.

The daemon's environment holds every secret of the swarm: each Model's key, each bot token, its
own API token. A process it starts gets :data:`BASE_ENVIRONMENT` and the names its plan lists
(``AgentPlan.environment``, ``ConnectionPlan.environment``), with the daemon's values taken
when the process starts; nothing else. The names are worked out here from what the process
runs:

- its **Model**: the variable of ``apiKey.valueFrom.env``, or the candidates of
  ``apiKey.valueFrom.secretRef``; with no ``apiKey``, the provider's key variable
  (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); and the provider's other settings
  (``bundle.provider_env.PROVIDER_SETTINGS_ENV``);
- its **Tools and Extensions**: their ``spec.env``, every ``{valueFrom: ...}`` anywhere in
  their config, and the names of a config ``passEnv`` list (the ``bash`` tool's);
- the **Agent**'s own ``spec.env``, for what a tool reads that it does not declare;
- for a **Connection**: the ``valueFrom`` of its ``config`` and ``secrets``, and its
  Connector's ``spec.env``.

A name may end in ``*``: every variable with that prefix. Registry tools (every Tool of the
bundle the agent does not list) count only under ``allowRegistryCalls``, which lets the agent
call them all; a tool that step middleware offers otherwise needs its names in the Agent's
``spec.env``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import ValidationError

from bundle.env_names import ENV_NAME
from bundle.provider_env import PROVIDER_KEY_ENV, PROVIDER_SETTINGS_ENV
from bundle.secrets import secret_candidates
from bundle.spec_agent import ModelSpec
from bundle.spec_base import ValueSource
from bundle.spec_connector import ConnectionSpec, ConnectorSpec

BASE_ENVIRONMENT = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "VIRTUAL_ENV",
    "LD_LIBRARY_PATH",
    "PYTHON*",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "NO_COLOR",
    "GOONDAN_LOG_LEVEL",
    "GOONDAN_ALLOW_OUTSIDE_BUNDLE",
    "GOONDAN_CRASHPOINT",
)
"""What every process the daemon starts gets of its environment, whatever it runs: the fork
server's whole environment, and the start of every agent's and connector's.

Each is there because the runtime needs it and none holds a secret by convention:

- ``PATH``, ``HOME``, ``USER``, ``LOGNAME``, ``TMPDIR``: where programs, the user's files and
  temporary files are (the ``bash`` tool and MCP stdio servers pass them on);
- ``LANG``, ``LANGUAGE``, ``LC_*``, ``TZ``: how text and times are read and shown;
- ``VIRTUAL_ENV``, ``LD_LIBRARY_PATH``, ``PYTHON*`` (``PYTHONPATH`` above all): the fork server
  is a new interpreter, which must find its libraries and import the runtime as the daemon
  does;
- ``SSL_CERT_FILE``, ``SSL_CERT_DIR`` and the proxy variables, both cases (``HTTP_PROXY``,
  ``HTTPS_PROXY``, ``ALL_PROXY``, ``NO_PROXY``): how the SDKs and tools reach the network
  from where the daemon runs; a proxy URL with a password in it is the operator's choice;
- ``NO_COLOR``, ``GOONDAN_LOG_LEVEL``: how every process logs (the CLI sets both for its
  children);
- ``GOONDAN_ALLOW_OUTSIDE_BUNDLE``: whether entry modules may lie outside the bundle;
- ``GOONDAN_CRASHPOINT``: set only by tests, to freeze a process at a named point and kill it
  there (``goondan.crashpoints``).

Not here, by design: every other ``GOONDAN_*`` variable (the API token's, ``GOONDAN_SECRET_*``,
the cluster's ``GOONDAN_NATS_*``), ``GOONDAN_AGENT_SCOPE`` (each process makes its own) and
``NOTIFY_SOCKET`` (systemd's, for the daemon alone).
"""

PASS_ENV_KEY = "passEnv"
"""A config key listing variables the component hands on to programs it starts (``bash``)."""


def matches(name: str, patterns: Iterable[str]) -> bool:
    """Whether ``name`` is one of ``patterns`` or has the prefix of one ending in ``*``."""
    for pattern in patterns:
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return True
    return False


def select(environ: Mapping[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """The variables of ``environ`` that ``patterns`` name (see :func:`matches`)."""
    wanted = tuple(patterns)
    exact = {p for p in wanted if not p.endswith("*")}
    prefixes = tuple(p[:-1] for p in wanted if p.endswith("*"))
    return {
        name: value
        for name, value in environ.items()
        if name in exact or (prefixes and name.startswith(prefixes))
    }


def value_source_names(source: ValueSource, field: str = "value") -> list[str]:
    """The variables ``source`` is read from (none for a literal ``value``); ``field`` is the
    name it is resolved under, which a ``secretRef`` without ``key`` reads by."""
    if source.value_from is None:
        return []
    if source.value_from.env is not None:
        return [source.value_from.env]
    assert source.value_from.secret_ref is not None
    return secret_candidates(source.value_from.secret_ref, field)


def model_names(spec: ModelSpec) -> list[str]:
    """What a Model reads: its key's variables, or its provider's key variable, and the
    provider's settings."""
    names = value_source_names(spec.api_key, "apiKey") if spec.api_key is not None else []
    if spec.api_key is None and spec.provider in PROVIDER_KEY_ENV:
        names.append(PROVIDER_KEY_ENV[spec.provider])
    for name in PROVIDER_SETTINGS_ENV.get(spec.provider, ()):
        if not (name.endswith("_BASE_URL") and (spec.base_url or spec.endpoint)):
            names.append(name)
    return names


def config_names(config: Mapping[str, Any]) -> list[str]:
    """What a Tool's or Extension's config asks for: every ``{valueFrom: ...}`` object in it
    (at any depth; a ``secretRef`` read under the key that holds it, as the chat tools'
    ``token``), and the names of a top-level ``passEnv`` list that are names or ``PREFIX*``.
    """
    names: list[str] = []
    passed = config.get(PASS_ENV_KEY)
    if isinstance(passed, list):
        names += [n for n in passed if isinstance(n, str) and ENV_NAME.match(n)]
    stack: list[tuple[str, Any]] = [("value", config)]
    while stack:
        field, node = stack.pop()
        if isinstance(node, dict):
            if "valueFrom" in node:
                try:
                    source = ValueSource.model_validate(node)
                except ValidationError:  # not a value source: the component's own shape
                    pass
                else:
                    names += value_source_names(source, field)
                    continue
            stack.extend((str(key), value) for key, value in node.items())
        elif isinstance(node, list):
            stack.extend((field, item) for item in node)
    return names


def component_names(declared: Iterable[str], config: Mapping[str, Any]) -> list[str]:
    """What a Tool or Extension reads: its ``spec.env`` and what its config asks for."""
    return [*declared, *config_names(config)]


def connection_names(spec: ConnectionSpec, connector: ConnectorSpec) -> list[str]:
    """What a Connection's process reads: the ``valueFrom`` of its config and secrets (each
    under its key), and the Connector's ``spec.env``."""
    names = list(connector.env)
    for values in (spec.config, spec.secrets):
        for key, source in values.items():
            names += value_source_names(source, key)
    return names


def environment_list(*groups: Iterable[str]) -> list[str]:
    """``groups`` as one sorted list without repeats, less what :data:`BASE_ENVIRONMENT`
    gives every process anyway: a plan's ``environment``."""
    return sorted({n for group in groups for n in group if n not in BASE_ENVIRONMENT})
