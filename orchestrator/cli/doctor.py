"""``doctor``: is this machine ready to run this swarm? Each problem with its fix.

Checks the Python, the installed extras (and which ones the swarm needs), the configuration,
the API keys its Models read and the secrets its Connections read (from the environment after
``.env`` files: names only, never values), the state directory, a daemon already running, and
the cluster client when the swarm places agents on other hosts.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec

from goondan.errors import ConfigCode, ExitCode
from goondan.providers import provider, sdk_installed
from orchestrator.cli.envfiles import key_hint

Level = Literal["ok", "warn", "fail", "info"]
EXTRAS = {
    "openai": ("openai", "the openai provider"),
    "anthropic": ("anthropic", "the anthropic provider"),
    "google": ("google.genai", "the google provider"),
    "mcp": ("mcp", "MCP servers (the mcp-bridge extension)"),
    "connectors": ("cryptography", "the discord connector's signatures"),
    "cluster": ("nats", "agents on several hosts (--cluster)"),
    "otel": ("opentelemetry.sdk", "OpenTelemetry export (--otlp-endpoint)"),
}
"""extra → (module it installs, what it is for)."""
DISTRIBUTION = "goondan-py"


@dataclass
class Check:
    """One finding."""

    name: str
    level: Level
    detail: str
    fix: str | None = None
    exit_code: int = ExitCode.OK


@dataclass
class Report:
    """Every finding, and the exit status they add up to."""

    checks: list[Check] = field(default_factory=list)

    def add(self, *args: Any, **kwargs: Any) -> Check:
        check = Check(*args, **kwargs)
        self.checks.append(check)
        return check

    @property
    def problems(self) -> list[Check]:
        return [c for c in self.checks if c.level == "fail"]

    @property
    def exit_code(self) -> int:
        """0 when nothing failed; else the first failure's status."""
        problems = self.problems
        return int(problems[0].exit_code or ExitCode.INTERNAL) if problems else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "exitCode": self.exit_code,
            "checks": [asdict(c) for c in self.checks],
        }


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def examine(bundle_path: Path, state_dir: Path, environ: dict[str, str] | None = None) -> Report:
    """Every check, in order (``environ``: the environment after the ``.env`` files)."""
    env = dict(os.environ) if environ is None else environ
    report = Report()
    _python(report)
    _distribution(report)
    have = _extras(report)
    bundle = _bundle(report, bundle_path)
    if bundle is not None:
        _needs(report, bundle, have, env)
    _state(report, state_dir)
    return report


def _python(report: Report) -> None:
    version = sys.version_info
    if version >= (3, 11):
        report.add("python", "ok", f"Python {version.major}.{version.minor}.{version.micro}")
    else:
        report.add(
            "python", "fail", f"Python {version.major}.{version.minor}", "use Python 3.11 or newer"
        )


def _distribution(report: Report) -> None:
    try:
        report.add("goondan", "ok", f"{DISTRIBUTION} {importlib.metadata.version(DISTRIBUTION)}")
    except importlib.metadata.PackageNotFoundError:
        report.add("goondan", "info", "running from a source tree (not installed)")


def _extras(report: Report) -> dict[str, bool]:
    """Which extras are installed, by name (and reported)."""
    have = {extra: installed(module) for extra, (module, _) in EXTRAS.items()}
    report.add(
        "extras",
        "info",
        "installed: "
        + (", ".join(e for e, ok in have.items() if ok) or "none")
        + "; not installed: "
        + (", ".join(e for e, ok in have.items() if not ok) or "none"),
    )
    return have


def _bundle(report: Report, bundle_path: Path) -> Any:
    from bundle import BundleError, load_bundle

    try:
        bundle = load_bundle(bundle_path)
    except BundleError as exc:
        missing = all(i.code == ConfigCode.E_CONFIG_FILE_NOT_FOUND for i in exc.errors)
        first = exc.errors[0].format().splitlines()[0] if exc.errors else str(exc)
        report.add(
            "configuration",
            "fail",
            first if missing else f"{len(exc.errors)} error(s); first: {first}",
            "python -m orchestrator init, or -c PATH"
            if missing
            else "python -m orchestrator validate shows every error",
            ExitCode.CONFIG if missing else ExitCode.VALIDATION,
        )
        return None
    report.add("configuration", "ok", f"{bundle.path}: valid ({bundle.summary()})")
    return bundle


def _needs(report: Report, bundle: Any, have: dict[str, bool], env: dict[str, str]) -> None:
    """What the swarm needs of this host: SDKs, extras, the sandbox, keys and settings."""
    try:
        swarm = bundle.swarm()
    except Exception as exc:  # several swarms and none is `default`
        report.add("swarm", "fail", str(exc), "name one `default`", ExitCode.VALIDATION)
        return
    _provider_sdks(report, bundle, swarm)
    if swarm.spec.placement and not have["cluster"]:
        report.add(
            "extra cluster",
            "warn",
            "the Swarm places agents on other hosts; --cluster needs the NATS client",
            f"pip install '{DISTRIBUTION}[cluster]'",
        )
    _sandbox(report, bundle, swarm.name)
    _keys(report, bundle, swarm.name, env)
    _connection_settings(report, bundle, swarm.name, env)


def _provider_sdks(report: Report, bundle: Any, swarm: Any) -> None:
    """The SDK of each provider a Model of the swarm uses."""
    providers = {
        bundle.resolve_ref(agent.spec.model_config_.model_ref, agent).spec.provider
        for agent in bundle.swarm_agents(swarm)
    }
    for name in sorted(providers):
        found = provider(name)
        if found is not None and found.extra is not None and not sdk_installed(found):
            report.add(
                f"extra {found.extra}",
                "fail",
                f"a Model uses provider {name}, whose SDK is not installed",
                found.install,
                ExitCode.CONFIG,
            )


def _keys(report: Report, bundle: Any, swarm: str, env: dict[str, str]) -> None:
    """The API keys the swarm's Models read from the environment."""
    from bundle.keys import key_needs

    needs = key_needs(bundle, swarm)
    if not needs:
        report.add("keys", "ok", "no Model of the swarm needs an API key from the environment")
    for need in needs:
        users = ", ".join(need.agents)
        if need.present(env):
            report.add(f"key {need.variable}", "ok", f"set (Model/{need.model}, used by {users})")
        else:
            report.add(
                f"key {need.variable}",
                "fail",
                f"not set: Model/{need.model} ({need.provider}, used by {users}) reads it",
                key_hint(bundle.path).replace("put it", f"put {need.variable}=...", 1),
                ExitCode.AUTH,
            )


def _connection_settings(report: Report, bundle: Any, swarm: str, env: dict[str, str]) -> None:
    """The variables the swarm's Connections read: a connector without one cannot start."""
    from bundle.connection_needs import connection_needs

    for need in connection_needs(bundle, swarm):
        name = f"connection {need.connection} {need.variables[0]}"
        if need.present(env):
            report.add(name, "ok", f"set (Connection/{need.connection}, {need.connector})")
        else:
            fix = need.fix(key_hint(bundle.path))
            report.add(name, "fail", need.problem(), fix, ExitCode.AUTH)


def _sandbox(report: Report, bundle: Any, swarm: str) -> None:
    from orchestrator.cli import sandbox_check

    finding = sandbox_check.examine(bundle, swarm)
    users = ", ".join(finding.agents) or "no agent of the swarm starts programs"
    if finding.refused:
        report.add("sandbox", "fail", finding.refusal(), finding.fix, ExitCode.INTERNAL)
    elif finding.backend is None:
        report.add("sandbox", "warn", f"none can be made here: {finding.reason} ({users})",
                   finding.fix)  # fmt: skip
    elif finding.backend == "off":
        report.add("sandbox", "warn", f"off: tool programs run unconfined ({users})",
                   "remove the Swarm's spec.policy.sandbox: off")  # fmt: skip
    else:
        report.add("sandbox", "ok", f"{finding.backend}: {finding.reason}; for {users}")
    if finding.disk:
        report.add("sandbox disk", "ok", f"workspace disk quotas (diskMiB): {finding.disk}")
    if finding.backend not in (None, "off") and finding.processes == "none":
        report.add(
            "sandbox processes",
            "warn",
            "the per-call process limit does not hold: root ignores RLIMIT_NPROC and no pids "
            "cgroup is writable",
            "run the daemon as another user, or give it a cgroup with the pids controller",
        )


def _state(report: Report, state_dir: Path) -> None:
    from orchestrator.http.client import DaemonApi, NoAnswer, NoDaemon

    probe = state_dir if state_dir.exists() else state_dir.parent
    if os.access(probe, os.W_OK | os.X_OK):
        report.add("state directory", "ok", f"{state_dir} is writable")
    else:
        report.add(
            "state directory",
            "fail",
            f"{probe} is not writable by this user",
            "fix its owner or mode, or pass --state-dir",
            ExitCode.CONFIG,
        )
        return
    try:
        status, body = DaemonApi(state_dir, timeout=2).call("GET", "/v1/agents")
    except (NoDaemon, NoAnswer, OSError):
        report.add("daemon", "info", "none running on this state directory")
        return
    if status == 200 and isinstance(body, dict):
        running = msgspec.convert(body, _Running)
        report.add("daemon", "info", f"running (pid {running.pid}, swarm {running.swarm})")


class _Running(msgspec.Struct):
    """What ``doctor`` shows of our daemon's ``/v1/agents`` (``SwarmStatus``); a daemon of
    another version may leave out either."""

    pid: object = None
    """The daemon's pid."""
    swarm: object = None
    """The Swarm it runs."""
