"""The commands about a swarm's files and this machine, needing no daemon: ``init``,
``doctor``, ``package``, ``tool`` and ``completion``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from goondan.errors import ExitCode
from orchestrator.cli.common import bundle_path, fail, state_dir_of


def cmd_init(args: argparse.Namespace) -> int:
    """Write a runnable swarm from a template; refuses to overwrite without ``--force``."""
    from orchestrator.cli.scaffold import ScaffoldRefused, scaffold

    target = Path(args.path)
    try:
        done = scaffold(target, args.template, name=args.name, force=args.force)
    except ScaffoldRefused as exc:
        return fail(args, ExitCode.USAGE, str(exc))
    except OSError as exc:
        return fail(args, ExitCode.CONFIG, f"cannot write {target}: {exc}")
    files = [str(f.relative_to(target)) for f in done.files]
    if args.json:
        print(json.dumps({"directory": str(target), "template": done.template, "files": files}))
        return 0
    print(f"wrote the {done.template} template's swarm ({done.name}) in {target}:")
    for name in files:
        print(f"  {name}")
    where = "" if target.resolve() == Path.cwd() else f"cd {args.path} && "
    needs_key = done.template in ("openai", "anthropic")
    print()
    if needs_key:
        print("next: cp .env.example .env, put your key in it, then")
    print(f'  {where}python -m orchestrator run --input "I am Ada"')
    print("  python -m orchestrator doctor           # is everything in place?")
    print("  python -m pytest tools                   # the tool's own tests")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check this machine and configuration; exit 0 when all is well, else the status of
    the first problem (each printed with its fix)."""
    from orchestrator.cli.doctor import examine
    from orchestrator.cli.envfiles import EnvFileMissing, load_env_files

    path = bundle_path(args)
    environ = dict(os.environ)
    try:
        loaded = load_env_files(path, Path(args.env_file) if args.env_file else None, environ)
    except EnvFileMissing as exc:
        return fail(args, ExitCode.USAGE, str(exc))
    state_dir = state_dir_of(args)
    report = examine(path, state_dir, environ)
    if args.json:
        print(json.dumps({**report.to_json(), "envFiles": [str(f) for f in loaded.files]}))
        return report.exit_code
    marks = {"ok": "ok  ", "info": "    ", "warn": "warn", "fail": "FAIL"}
    if loaded.files:
        print(f"      env files: {', '.join(str(f) for f in loaded.files)}")
    for check in report.checks:
        print(f"{marks[check.level]}  {check.name}: {check.detail}")
        if check.fix and check.level in ("fail", "warn"):
            print(f"      fix: {check.fix}")
    problems = len(report.problems)
    print("all is well" if not problems else f"{problems} problem{'s' if problems > 1 else ''}")
    return report.exit_code


def cmd_package(args: argparse.Namespace) -> int:
    """``package add|install|update|publish`` (orchestrator/cli/packages.py)."""
    from orchestrator.cli.packages import cmd_package as run

    return run(args)


def cmd_tool(args: argparse.Namespace) -> int:
    """``tool schema`` (orchestrator/cli/tool.py)."""
    from orchestrator.cli.tool import cmd_tool as run

    return run(args)


def cmd_completion(args: argparse.Namespace) -> int:
    """Print what to source in ``args.shell`` to complete ``goondan`` and
    ``python -m orchestrator`` (orchestrator/cli/completion.py)."""
    from orchestrator.cli.completion import script

    print(script(args.shell))
    return 0
