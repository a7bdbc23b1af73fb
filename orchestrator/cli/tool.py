"""``goondan tool schema MODULE[:FUNCTION]``: the ``exports`` entry a typed handler describes,
to paste into a Tool of goondan.yaml, or with ``--check`` to compare with the one there.

The entry is derived by ``python -m tools_base.tool_schema`` in a child process: this package
does not import ``tools_base`` (DESIGN.md arrows), and the user's module, imported there, cannot
end or wedge the command. The comparison is the one ``validate`` warns with
(:mod:`bundle.tool_hints`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import msgspec
import yaml

from goondan.errors import ExitCode
from orchestrator.cli.common import fail
from orchestrator.validation import last_line, run_checking_child, validate_timeout

_CHILD_STATUS = {2: ExitCode.USAGE, 3: ExitCode.CONFIG, 4: ExitCode.VALIDATION}
"""The child's exit status (see ``tools_base.tool_schema``) as this command's."""


def add_arguments(tool: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """The subcommands of ``tool``."""
    actions = tool.add_subparsers(dest="tool_command", metavar="ACTION", required=True)
    schema = actions.add_parser(
        "schema",
        help="print the exports entry a typed handler describes (YAML, or --json)",
        parents=[common],
    )
    schema.add_argument(
        "target",
        metavar="MODULE[:FUNCTION]",
        help="tools/greet.py:hello or tools.greet:hello (relative to here, then to the "
        "--check configuration's directory); without :FUNCTION, every @tool handler of the "
        "module's `handlers`",
    )
    schema.add_argument("--json", action="store_true", help="print the entries as JSON")
    schema.add_argument(
        "--check",
        metavar="FILE",
        help="compare with the Tool in FILE (goondan.yaml or its directory) whose entry is "
        "MODULE instead of printing; exit 4 when they disagree",
    )


def cmd_tool(args: argparse.Namespace) -> int:
    """Run ``tool ACTION`` (``schema`` is the only one)."""
    bases = [_bundle_dir(Path(args.check))] if args.check else []
    answer, status = _derive(args.target, bases)
    if answer.error is not None or answer.exports is None:
        return fail(args, status, str(answer.error.message if answer.error else None))
    exports = answer.exports
    if args.check:
        return _check(args, Path(args.check), Path(str(answer.file)), exports)
    if args.json:
        print(json.dumps(exports, indent=2))
    else:
        # Indented as it stands under a Tool's `spec:`, so it pastes as it is.
        entry = yaml.dump(
            {"exports": exports}, Dumper=_EntryDumper, sort_keys=False, allow_unicode=True
        )
        print("# the Tool's exports: paste under its `spec:` in goondan.yaml")
        print(textwrap.indent(entry, "  "), end="")
    return int(ExitCode.OK)


def _bundle_dir(path: Path) -> Path:
    return (path if path.is_dir() else path.parent).resolve()


class _Refusal(msgspec.Struct):
    """Why the child derived no entries."""

    message: object = None
    """What went wrong."""


class _Derived(msgspec.Struct):
    """The answer ``python -m tools_base.tool_schema`` prints: the entries, or a refusal."""

    exports: list[dict[str, Any]] | None = None
    """One Tool export entry per handler."""
    file: object = None
    """The module's file."""
    error: _Refusal | None = None
    """Why there are none."""


def _refused(message: str) -> _Derived:
    return _Derived(error=_Refusal(message))


def _derive(target: str, bases: list[Path]) -> tuple[_Derived, int]:
    """The child's answer and this command's exit status for it."""
    command = [sys.executable, "-m", "tools_base.tool_schema", target]
    for base in bases:
        command += ["--base", str(base)]
    timeout = validate_timeout()
    try:
        done = run_checking_child(command, timeout)
    except subprocess.TimeoutExpired:
        message = f"importing {target} did not finish within {timeout:g} s"
        return _refused(message), int(ExitCode.CONFIG)
    try:
        answer: _Derived | None = msgspec.json.decode(done.stdout, type=_Derived)
    except (msgspec.DecodeError, msgspec.ValidationError):
        answer = None
    if answer is None or (answer.error is None and answer.exports is None):
        last = last_line(done.stderr)
        message = f"importing {target} ended (exit code {done.returncode}) without an answer"
        return _refused(message + (f": {last}" if last else "")), int(ExitCode.CONFIG)
    return answer, int(_CHILD_STATUS.get(done.returncode, ExitCode.OK))


def _check(
    args: argparse.Namespace, config: Path, file: Path, exports: list[dict[str, Any]]
) -> int:
    """Compare each derived entry with the export of the same name of the Tool whose entry
    is ``file``; print what differs."""
    from bundle import BundleError, load_bundle
    from bundle.tool_hints import parameter_differences
    from orchestrator.validation import config_exit

    try:
        bundle = load_bundle(config, check_handlers=False)
    except BundleError as exc:
        first = exc.errors[0].format() if exc.errors else str(exc)
        return fail(args, config_exit(exc.errors), f"{config} is not valid: {first}")
    tools = [
        r for r in bundle.of_kind("Tool") if (r.base_dir / r.spec.entry).resolve() == file.resolve()
    ]
    if not tools:
        return fail(
            args,
            ExitCode.VALIDATION,
            f"no Tool in {config} has the entry {args.target.partition(':')[0]}",
            "add a Tool whose spec.entry is that file, with the entry `tool schema` prints",
        )
    results = []
    for entry in exports:
        for resource in tools:
            declared = next((e for e in resource.spec.exports if e.name == entry["name"]), None)
            if declared is None:
                found = [f"{resource.ref_string} declares no export {entry['name']!r}"]
            else:
                found = parameter_differences(declared.parameters, entry["parameters"])
            results.append(
                {"tool": resource.ref_string, "export": entry["name"], "differences": found}
            )
    agrees = not any(r["differences"] for r in results)
    code = int(ExitCode.OK if agrees else ExitCode.VALIDATION)
    if args.json:
        print(json.dumps({"agrees": agrees, "results": results, "exitCode": code}, indent=2))
        return code
    for result in results:
        where = f"{result['tool']} export {result['export']!r}"
        if not result["differences"]:
            print(f"{where}: agrees with the handler's hints")
        for difference in result["differences"]:
            print(f"{where}: {difference}")
    return code


class _EntryDumper(yaml.SafeDumper):
    """Block style, and multi-line descriptions as ``|`` blocks, as one writes them by hand."""


def _string(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_EntryDumper.add_representer(str, _string)
