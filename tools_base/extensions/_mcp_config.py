"""The configuration of the ``mcp`` extension: each server's spec, checked where it is read,
every mistake named by its path in the Extension's ``config`` (see :mod:`.mcp_bridge`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeGuard

from tools_base import ExtensionError, ToolConfigError
from tools_base.sandbox import SandboxPolicy


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerSpec:
    """One configured MCP server."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    tools: frozenset[str] | None = None
    startup_timeout: float = 20.0
    call_timeout: float = 60.0
    sandbox: SandboxPolicy | None = None
    """What a stdio server may do in the tool sandbox; ``None`` runs it unconfined."""


def parse_servers(config: Mapping[str, Any]) -> list[ServerSpec]:
    """``config.servers`` checked; a mistake is an :class:`ExtensionError` naming the key."""
    servers = config.get("servers") or []
    if not isinstance(servers, list):
        raise ExtensionError("config.servers must be a list")
    specs: list[ServerSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(servers):
        spec = _server_spec(raw, f"config.servers[{i}]", seen)
        seen.add(spec.name)
        specs.append(spec)
    return specs


def _server_spec(raw: object, at: str, seen: set[str]) -> ServerSpec:
    """One entry of ``config.servers`` (``at`` names it in errors); ``seen``: the names before."""
    if not isinstance(raw, dict):
        raise ExtensionError(f"{at} must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name or name in seen:
        raise ExtensionError(f"{at}.name must be a unique, non-empty string")
    command, url = _transport(raw, at)
    args = raw.get("args", [])
    if not _is_list_of_strings(args):
        raise ExtensionError(f"{at}.args must be a list of strings")
    env = _env(raw, at)
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise ExtensionError(f"{at}.cwd must be a string")
    return ServerSpec(
        name=name,
        command=command,
        args=tuple(args),
        env=env,
        cwd=cwd,
        url=url,
        tools=_tools(raw, at),
        startup_timeout=_seconds(raw, "startupTimeoutSeconds", 20.0, at),
        call_timeout=_seconds(raw, "callTimeoutSeconds", 60.0, at),
        sandbox=_sandbox(raw, at, stdio=command is not None),
    )


def _transport(raw: Mapping[str, Any], at: str) -> tuple[str | None, str | None]:
    """``(command, url)`` of a server: exactly one of them, each well formed."""
    command, url = raw.get("command"), raw.get("url")
    if (command is None) == (url is None):
        raise ExtensionError(f"{at} needs exactly one of `command` (stdio) or `url` (HTTP)")
    if command is not None and not (isinstance(command, str) and command):
        raise ExtensionError(f"{at}.command must be a non-empty string")
    if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
        raise ExtensionError(f"{at}.url must be an http(s) URL")
    return command, url


def _env(raw: Mapping[str, Any], at: str) -> dict[str, str] | None:
    env = raw.get("env")
    if env is not None and not (
        isinstance(env, dict) and all(isinstance(v, str) for v in env.values())
    ):
        raise ExtensionError(f"{at}.env must map names to strings")
    return env


def _tools(raw: Mapping[str, Any], at: str) -> frozenset[str] | None:
    """The server's tools the agent may see (``None``: all of them)."""
    tools = raw.get("tools")
    if tools is None:
        return None
    if not _is_list_of_strings(tools):
        raise ExtensionError(f"{at}.tools must be a list of tool names")
    return frozenset(tools)


def _is_list_of_strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def _sandbox(raw: Mapping[str, Any], at: str, *, stdio: bool) -> SandboxPolicy | None:
    """A server's ``sandbox``: ``None`` for an HTTP server or one that opted out."""
    if "sandbox" in raw and not stdio:
        raise ExtensionError(
            f"{at}.sandbox applies to stdio servers (`command`) only: the agent does not start "
            "an HTTP server"
        )
    if not stdio:
        return None
    value = raw.get("sandbox")
    if value is False:
        return None
    if value is not None and not isinstance(value, dict):
        raise ExtensionError(f"{at}.sandbox must be false or an object, got {value!r}")
    try:
        # Operators choose MCP servers and most need the network; a server lives long, so a
        # CPU-time bound would end it at some random call.
        return SandboxPolicy.from_config(at, value, network=True, cpu=False)
    except ToolConfigError as exc:
        said = re.sub(rf"^{re.escape(at)} config '(sandbox[^']*)'", rf"{at}.\1", str(exc))
        raise ExtensionError(said if said != str(exc) else f"{at}.sandbox: {exc}") from None


def _seconds(raw: Mapping[str, Any], key: str, default: float, at: str) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ExtensionError(f"{at}.{key} must be a positive number of seconds")
    return float(value)
