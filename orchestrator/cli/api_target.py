"""Which daemon a command of the CLI talks to, and how what goes wrong becomes its exit status.

By default, the daemon serving the state directory (``-c FILE`` / ``--state-dir``), over its
``api.sock``: the socket's file mode and the caller's credentials are the check, and no token is
needed. With ``--api-url http://HOST:PORT`` (or ``GOONDAN_API_URL`` in the environment), the
daemon listening there (``run --listen``), over TCP, carrying the bearer token held by the
variable ``--api-token-env`` names (never the token itself: a command line is visible to every
user of the machine). Both options are added by :mod:`orchestrator.cli.api_options`.

Every failure says which of these it was about: a bad URL names ``--api-url`` or
``GOONDAN_API_URL`` (exit 2), a token variable not set names the variable, and a daemon that
refuses the token (401) says whether one was sent (exit 6); nobody answering is exit 5, as on
``api.sock``.

A clustered swarm's leaders (the leader and its standbys) are named together: ``--api-url``
repeated, or separated by commas. They are asked in order until one answers; a request with
an idempotency key (``send``: always) is asked again on the next leader when its leader is
lost, until its timeout (:mod:`orchestrator.http.retry`).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

from goondan.errors import ExitCode
from orchestrator.cli.api_options import API_URL_ENV
from orchestrator.http.client import (
    ApiUrl,
    DaemonApi,
    EventsRefused,
    NoAnswer,
    NoDaemon,
    error_text,
)

Failure = Literal["usage", "credential", "no-daemon", "no-answer", "refused"]
_EXIT: dict[Failure, ExitCode] = {
    "refused": ExitCode.INTERNAL,
    "usage": ExitCode.USAGE,
    "credential": ExitCode.AUTH,
    "no-daemon": ExitCode.NETWORK,
    "no-answer": ExitCode.NETWORK,
}


class TargetError(Exception):
    """The daemon could not be asked, or refused who asked; ``exit_code`` is the CLI's."""

    def __init__(self, failure: Failure, message: str) -> None:
        super().__init__(message)
        self.failure: Failure = failure
        self.exit_code = int(_EXIT[failure])


def remote_urls(args: argparse.Namespace) -> list[ApiUrl]:
    """The URLs of the daemon (a cluster's leaders, in order) to talk to over TCP; empty for
    ``api.sock``."""
    given = getattr(args, "api_url", None)
    source, value = ("--api-url", given) if given else (API_URL_ENV, os.environ.get(API_URL_ENV))
    if not value:
        return []
    urls = []
    for one in value.split(","):
        if not one.strip():
            raise TargetError("usage", f"{source}: an empty URL in {value!r}")
        try:
            urls.append(ApiUrl.parse(one))
        except ValueError as exc:
            raise TargetError("usage", f"{source}: {exc}") from None
    return urls


def remote_url(args: argparse.Namespace) -> ApiUrl | None:
    """The (first) URL of the daemon to talk to over TCP, or ``None`` for ``api.sock``."""
    urls = remote_urls(args)
    return urls[0] if urls else None


def _token(args: argparse.Namespace) -> str | None:
    name = getattr(args, "api_token_env", None)
    if name is None:
        return None
    token = os.environ.get(name, "")
    if not token:
        raise TargetError("credential", f"--api-token-env {name}: the variable is not set or empty")
    if any(ch.isspace() or not ch.isprintable() for ch in token):
        raise TargetError(
            "credential", f"--api-token-env {name}: the variable holds spaces or control characters"
        )
    return token


def daemon_api(args: argparse.Namespace, state_dir: Callable[[], Path]) -> DaemonApi:
    """The API of the daemon the command's options name (``state_dir`` is asked only for
    ``api.sock``)."""
    urls = remote_urls(args)
    # The same key on every try of this invocation: a retry never runs a second Turn.
    key = getattr(args, "idempotency_key", None)
    try:
        api = (
            DaemonApi(url=urls[0], token=_token(args), standby=urls[1:], idempotency_key=key)
            if urls
            else DaemonApi(state_dir(), idempotency_key=key)
        )
    except ValueError as exc:  # a key that may not be sent
        raise TargetError("usage", f"--idempotency-key: {exc}") from None
    api.reattach_seconds = float(getattr(args, "reattach", 0.0) or 0.0)
    return api


def _refused_credential(args: argparse.Namespace, api: DaemonApi, body: Any) -> TargetError:
    name = getattr(args, "api_token_env", None)
    if api.url is None:  # api.sock asks for none: a daemon of another version
        return TargetError(
            "credential", f"the daemon at {api.where} wants a token: {error_text(body)}"
        )
    if api.token is None:
        return TargetError(
            "credential",
            f"the daemon at {api.url} wants a bearer token: pass --api-token-env NAME, "
            "the environment variable holding it",
        )
    return TargetError("credential", f"the daemon at {api.url} refused the token in ${name}")


def ask(
    args: argparse.Namespace,
    state_dir: Callable[[], Path],
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    wait_seconds: float | None = None,
) -> tuple[int, Any]:
    """The daemon's ``(status, body)``, or :class:`TargetError` (a 401 included)."""
    api = _waiting_api(args, state_dir, wait_seconds)
    return _asked(args, api, lambda: api.call(method, path, body))


def ask_with_events(
    args: argparse.Namespace,
    state_dir: Callable[[], Path],
    path: str,
    body: dict[str, Any],
    on_event: Callable[[str, dict[str, Any]], None],
    wait_seconds: float | None = None,
) -> tuple[int, Any]:
    """:func:`ask` for a ``POST`` whose answer may come as server-sent events: each event but
    the answer goes to ``on_event`` as it arrives (see :meth:`DaemonApi.call_with_events`)."""
    api = _waiting_api(args, state_dir, wait_seconds)
    return _asked(args, api, lambda: api.call_with_events(path, body, on_event))


def _waiting_api(
    args: argparse.Namespace, state_dir: Callable[[], Path], wait_seconds: float | None
) -> DaemonApi:
    api = daemon_api(args, state_dir)
    if wait_seconds is not None:
        api.timeout = max(api.timeout, wait_seconds)
    return api


def _asked(
    args: argparse.Namespace, api: DaemonApi, call: Callable[[], tuple[int, Any]]
) -> tuple[int, Any]:
    try:
        status, answer = call()
    except NoDaemon as exc:
        raise TargetError("no-daemon", str(exc)) from exc
    except NoAnswer as exc:
        raise TargetError("no-answer", str(exc)) from exc
    if status == 401:
        raise _refused_credential(args, api, answer)
    return status, answer


def remote_rows(args: argparse.Namespace, path: str, key: str, **query: str | None) -> Any:
    """The rows a listing command reads from disk, asked of the daemon at ``--api-url``
    instead (``GET path?query`` answers ``{key: rows}``); TargetError past a refusal."""
    wanted = {name: value for name, value in query.items() if value is not None}
    target = f"{path}?{urlencode(wanted)}" if wanted else path
    status, answer = ask(args, _remote_only, "GET", target)
    if status >= 400:
        raise TargetError("refused", error_text(answer))
    return answer.get(key, []) if isinstance(answer, dict) else []


def _remote_only() -> Path:
    raise AssertionError("asked for a state directory with --api-url")


def open_events(args: argparse.Namespace, api: DaemonApi, query: str = "") -> Any:
    """The event stream of the daemon at ``--api-url`` (``logs -f``), or TargetError."""
    try:
        return api.open_events(query)
    except EventsRefused as exc:
        if exc.status == 401:
            raise _refused_credential(args, api, exc.body) from exc
        raise TargetError("no-answer", str(exc)) from exc
    except (NoDaemon, NoAnswer) as exc:
        raise TargetError("no-daemon", str(exc)) from exc
