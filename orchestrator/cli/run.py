"""``run`` and ``node``: the swarm (a daemon, or one ``--input`` answered) and a host's share
of a clustered swarm."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from goondan.errors import ExitCode
from orchestrator.cli.common import bundle_path, fail, serve, state_dir_of
from orchestrator.cli.envfiles import key_hint
from orchestrator.validation import config_exit

if TYPE_CHECKING:
    import asyncio

    from bundle import BundleError
    from orchestrator.callers import ApiToken
    from orchestrator.daemon import Orchestrator


def cmd_run(args: argparse.Namespace) -> int:
    """Run the swarm: one request with ``--input``, else a daemon until SIGINT/SIGTERM."""
    if args.input_file is not None:
        try:
            text = sys.stdin.read() if args.input_file == "-" else Path(args.input_file).read_text()
        except (OSError, UnicodeDecodeError) as exc:
            return fail(args, ExitCode.USAGE, f"--input-file {args.input_file}: {exc}")
        args.input = text
    if args.stream and args.input is None:
        return fail(args, ExitCode.USAGE, "--stream prints the answer of --input: give one")
    from orchestrator.cli.terminal import TerminalRequired, check_interactive

    try:
        check_interactive(args.interactive, one_shot=args.input is not None, detach=args.detach)
    except TerminalRequired as exc:
        return fail(args, ExitCode.USAGE, str(exc))
    detached = _detached_run(args)
    if detached is not None:
        return detached
    one_shot = args.input is not None
    return serve(args, "orchestrator", _run, one_shot=one_shot)


def _detached_run(args: argparse.Namespace) -> int | None:
    """``run --detach``, or ``run --input`` while a detached daemon runs: the exit status;
    ``None`` when this process is to run the swarm itself."""
    if not args.detach and args.input is None:
        return None
    from orchestrator.cli.detach import Detach, detach
    from orchestrator.state_dir import default_state_dir

    try:
        return detach(
            Detach(
                args,
                bundle_path(args),
                state_dir_of(args),
                default_state=state_dir_of(args) == default_state_dir(bundle_path(args)),
                run_parser=args.run_parser,  # set by the parser, which imports us
            )
        )
    except OSError as exc:  # the state directory cannot be written
        return fail(args, ExitCode.INTERNAL, str(exc))


class _MissingCredential(LookupError):
    """A credential the command line points at is not there (exit 6)."""


def _api_token(variable: str | None) -> ApiToken | None:
    """The bearer token from the environment variable ``variable`` (never from the command line,
    where other users could read it), named after the variable."""
    from orchestrator.callers import ApiToken

    if variable is None:
        return None
    token = os.environ.get(variable, "")
    if not token:
        raise _MissingCredential(f"--api-token-env {variable}: the variable is not set or empty")
    return ApiToken(variable, token)


def _missing_keys(bundle: Any, swarm: str | None) -> list[str]:
    """One line per API key the swarm's Models, or secret its Connections, read from an
    environment without it."""
    from bundle.connection_needs import missing_settings
    from bundle.keys import key_needs

    return [
        f"Model/{need.model} ({need.provider}, used by {', '.join(need.agents)}) needs "
        f"{need.variable}, which is not set"
        for need in key_needs(bundle, swarm)
        if not need.present(os.environ)
    ] + [need.problem() for need in missing_settings(bundle, swarm, os.environ)]


async def _run(args: argparse.Namespace) -> int:
    from orchestrator.preflight import check_soon

    path = bundle_path(args)
    # Checked while the Orchestrator loads: the check starts the fork server the agents
    # start from, and is forked from it.
    checking = check_soon(path)
    loaded = await _load(args, path, checking)
    if isinstance(loaded, int):
        return loaded
    refused = await _refusal(args, loaded, path, checking)
    if refused is not None:
        return refused
    return await _serve(args, loaded)


async def _load(
    args: argparse.Namespace, path: Path, checking: asyncio.Future[dict[str, Any]]
) -> Orchestrator | int:
    """The swarm's Orchestrator, or the exit code of why it cannot be made (the configuration's
    own errors first)."""
    from bundle import BundleError
    from bundle.secrets import SecretUnavailable
    from orchestrator.daemon import Orchestrator
    from orchestrator.preflight import refusal
    from orchestrator.telemetry import TelemetryUnavailable, otlp_settings

    try:
        try:
            return Orchestrator.from_bundle(
                path,
                state_dir=state_dir_of(args),
                swarm=args.swarm,
                api_listen=args.listen,
                api_token=_api_token(args.api_token_env),
                cluster=_cluster_settings(args),
                otlp=otlp_settings(args.otlp_endpoint, os.environ),
            )
        except Exception:
            invalid = await refusal(path, checking, as_json=args.json)
            if invalid is not None:  # the configuration's errors come first
                return invalid
            raise
    except (_MissingCredential, SecretUnavailable) as exc:  # a token variable unset
        return fail(args, ExitCode.AUTH, str(exc))
    except TelemetryUnavailable as exc:  # --otlp-endpoint without the extra
        return fail(args, ExitCode.CONFIG, str(exc))
    except ValueError as exc:  # a --listen not HOST:PORT, a bad cluster option
        return fail(args, ExitCode.USAGE, str(exc))
    except BundleError as exc:
        return _bundle_refused(exc)


def _bundle_refused(exc: BundleError) -> int:
    """Print each of the configuration's errors; the exit status they call for."""
    for issue in exc.errors:
        print(issue.format(), file=sys.stderr)
    return config_exit(exc.errors)


async def _refusal(
    args: argparse.Namespace,
    orchestrator: Orchestrator,
    path: Path,
    checking: asyncio.Future[dict[str, Any]],
) -> int | None:
    """The exit code of why the loaded swarm must not start (the configuration's check, stdin
    wanted twice, a key unset, no sandbox), ``None`` when it may."""
    from orchestrator.preflight import refusal

    invalid = await refusal(path, checking, as_json=args.json)
    if invalid is not None:
        return invalid
    if args.interactive and orchestrator.connections.read_stdin:
        return fail(args, ExitCode.USAGE, "--interactive: a `cli` Connection reads stdin")
    from goondan.proctitle import name_process

    name_process("daemon", orchestrator.swarm.name)
    missing = _missing_keys(orchestrator.bundle, args.swarm)
    if missing:
        for line in missing[1:]:
            print(f"error: {line}", file=sys.stderr)
        return fail(
            args,
            ExitCode.AUTH,
            missing[0],
            f"{key_hint(orchestrator.bundle.path)}; `doctor` checks every key",
        )
    refused = await _sandbox_refusal(orchestrator.bundle, args.swarm)
    if refused is not None:
        return fail(args, ExitCode.INTERNAL, *refused)
    return None


async def _serve(args: argparse.Namespace, orchestrator: Orchestrator) -> int:
    """Start the swarm and answer ``--input``, prompt, or serve until stopped; shut down
    whatever happens."""
    from goondan.errors import DeliveryError
    from ipc import IpcError
    from orchestrator.cli.terminal import offers_prompt, prompt_loop
    from orchestrator.http.app import ApiRefused, DaemonAlreadyRunning

    orchestrator.install_signal_handlers()
    try:
        try:
            started = await orchestrator.start()
        except DeliveryError as exc:  # the cluster (NATS) cannot be used
            return fail(args, _cluster_exit(exc), str(exc))
        except (DaemonAlreadyRunning, ApiRefused, OSError) as exc:
            return fail(args, ExitCode.INTERNAL, str(exc))
        except (IpcError, TimeoutError) as exc:
            return fail(args, ExitCode.INTERNAL, f"the entry agent could not start: {exc}")
        if not started:  # stopped while waiting to lead the cluster: nothing to serve
            return 0
        if args.input is not None:
            from orchestrator.cli.one_request import answer_one_request

            return await answer_one_request(orchestrator, args)
        if args.watch:
            from orchestrator.watch import Watcher

            orchestrator.start_soon(Watcher(orchestrator).run(), "watch")
        if offers_prompt(args.interactive) and not orchestrator.connections.read_stdin:
            await prompt_loop(orchestrator, args.agent or orchestrator.entry_agent, args.instance)
        else:
            await orchestrator.wait_stopped()
        return 0
    finally:
        await orchestrator.shutdown()


async def _sandbox_refusal(bundle: Any, swarm: str | None) -> tuple[str, str] | None:
    """Why the swarm's tool programs cannot run here (no sandbox, not turned off) and the fix,
    or ``None``."""
    import asyncio

    from orchestrator.cli import sandbox_check

    finding = await asyncio.to_thread(sandbox_check.examine, bundle, swarm)
    return (finding.refusal(), finding.fix) if finding.refused else None


def _cluster_exit(exc: Exception) -> int:
    """AUTH for refused credentials, INTERNAL for a cluster held by another process,
    NETWORK for anything else the cluster cannot do."""
    from orchestrator.cluster.settings import ClusterAuthRefused, ClusterTaken

    if isinstance(exc, ClusterAuthRefused):
        return ExitCode.AUTH
    return ExitCode.INTERNAL if isinstance(exc, ClusterTaken) else ExitCode.NETWORK


def _cluster_settings(args: argparse.Namespace) -> Any:
    """The ``ClusterSettings`` of ``--cluster`` and its options; ``None`` without it."""
    if not getattr(args, "cluster", None):
        return None
    try:
        from orchestrator.cluster.settings import ClusterSettings
    except ImportError:  # pragma: no cover - the extra is missing
        raise ValueError(
            "--cluster needs the `cluster` extra: pip install 'goondan-py[cluster]'"
        ) from None
    if args.heartbeat_seconds <= 0:
        raise ValueError("--heartbeat-seconds must be positive")
    from orchestrator.cluster.settings import CLUSTER_KEY_ENV

    # Checked when the member connects (ClusterSettings.check_leader_key), after the usage.
    leader_key = os.environ.get(CLUSTER_KEY_ENV, "").encode() or None

    def path(value: str | None) -> Path | None:
        return Path(value) if value else None

    return ClusterSettings(
        url=args.cluster,
        name=args.cluster_name or "",
        creds_file=path(args.cluster_creds),
        nkey_seed_file=path(args.cluster_nkey),
        tls_ca_file=path(args.cluster_tls_ca),
        tls_cert_file=path(args.cluster_tls_cert),
        tls_key_file=path(args.cluster_tls_key),
        heartbeat_seconds=args.heartbeat_seconds,
        insecure=args.insecure_nats,
        leader_key=leader_key,
    )


def cmd_node(args: argparse.Namespace) -> int:
    """Run this host's share of a clustered swarm until SIGINT/SIGTERM."""
    return serve(args, "node", _node)


async def _node(args: argparse.Namespace) -> int:
    from bundle import BundleError
    from goondan.errors import DeliveryError
    from orchestrator.preflight import check_soon, refusal

    path = bundle_path(args)
    invalid = await refusal(path, check_soon(path), as_json=args.json)
    if invalid is not None:
        return invalid
    try:
        from orchestrator.cluster.node import Node

        node = Node(
            path,
            _cluster_settings(args),
            args.name,
            state_dir=state_dir_of(args),
            swarm=args.swarm,
            labels=args.label,
        )
    except ValueError as exc:
        return fail(args, ExitCode.USAGE, str(exc))
    except BundleError as exc:
        return _bundle_refused(exc)
    from goondan.proctitle import name_process

    name_process("node", args.name)
    node.install_signal_handlers()
    try:
        try:
            joined = await node.start()
        except DeliveryError as exc:
            return fail(args, _cluster_exit(exc), str(exc))
        if joined:
            await node.wait_stopped()
        return 0
    finally:
        await node.shutdown()
