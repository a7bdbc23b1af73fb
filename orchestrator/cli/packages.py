"""``goondan package add|install|update|publish``: a bundle's Goondan packages, installed with
pip into the environment goondan runs in and pinned in ``goondan.lock.yaml``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from goondan.errors import ExitCode
from orchestrator.cli.common import bundle_path, fail


def add_arguments(package: argparse.ArgumentParser, common: argparse.ArgumentParser) -> None:
    """The subcommands of ``package``."""
    actions = package.add_subparsers(dest="package_command", metavar="ACTION", required=True)

    def action(name: str, help: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help, parents=[common])
        sub.add_argument(
            "-c", "--config", metavar="FILE", help="goondan.yaml or its directory (default: here)"
        )
        sub.add_argument("--json", action="store_true", help="print the result as JSON")
        return sub

    def registry(sub: argparse.ArgumentParser) -> None:
        sub.add_argument(
            "--registry",
            metavar="URL",
            help="the package index (its simple API, e.g. https://pypi.org/simple/; default: "
            "the Package document's spec.registry.url, else pip's configuration)",
        )

    add = action("add", "record a dependency in the Package document and install it")
    add.add_argument("spec", metavar="NAME[@RANGE]", help="e.g. @acme/tools or @acme/tools@^1.2")
    add.add_argument("--distribution", help="the Python distribution providing it")
    add.add_argument(
        "-E", "--exact", action="store_true", help="record the exact version, not ^version"
    )
    registry(add)
    install = action("install", "install every dependency as goondan.lock.yaml pins it")
    install.add_argument(
        "--frozen-lockfile",
        action="store_true",
        help="install the lockfile as it is; fail (exit 4) if it differs from the Package document",
    )
    registry(install)
    update = action("update", "re-resolve within the ranges and rewrite goondan.lock.yaml")
    update.add_argument("name", nargs="?", help="only this dependency (default: all)")
    registry(update)
    publish = action("publish", "build a package's wheel and sdist and upload them")
    publish.add_argument(
        "path", nargs="?", default=".", help="the package's project directory (default: here)"
    )
    publish.add_argument("--dry-run", action="store_true", help="build and check, do not upload")
    publish.add_argument(
        "--registry",
        metavar="URL",
        help="the index's upload URL (default: TWINE_REPOSITORY_URL, else PyPI)",
    )
    publish.add_argument(
        "--no-build-isolation",
        action="store_true",
        help="build with this environment's build backend (no download)",
    )


def cmd_package(args: argparse.Namespace) -> int:
    """Run ``package ACTION``."""
    from bundle import BundleError
    from bundle.installer import PackageInstallError
    from bundle.lockfile import LockfileError
    from bundle.package_doc import PackageDocumentError
    from bundle.ranges import RangeError

    if args.package_command == "publish":
        return _publish(args)
    try:
        return _ACTIONS[args.package_command](args, _config(args))
    except BundleError as exc:
        for issue in exc.errors:
            print(issue.format(), file=sys.stderr)
        return int(ExitCode.CONFIG)
    except (RangeError, PackageDocumentError) as exc:
        return fail(args, ExitCode.VALIDATION, str(exc))
    except LockfileError as exc:
        return fail(args, ExitCode.CONFIG, str(exc), "delete it and run `goondan package install`")
    except PackageInstallError as exc:
        return fail(args, ExitCode.INTERNAL, str(exc))


def _config(args: argparse.Namespace) -> Path:
    path = bundle_path(args)
    return path / "goondan.yaml" if path.is_dir() else path


def _dependencies(config: Path) -> tuple[list[Any], Any]:
    """The Package document's dependencies (those goondan-py provides left out), and the
    document."""
    from bundle.package_doc import read_package
    from bundle.packages import Dependency

    document = read_package(config)
    found = [Dependency.of(d) for d in document.spec.dependencies]
    return [d for d in found if not d.builtin], document


def _pip(args: argparse.Namespace, document: Any) -> Any:
    from bundle.installer import Pip

    # spec.registry is the user's manifest, any shape: a url only when it is a string
    url = args.registry or (document.spec.registry or {}).get("url")
    return Pip(index_url=url if isinstance(url, str) else None)


def _report(args: argparse.Namespace, lockfile: Any, path: Path | None, before: Any = None) -> int:
    """Print what is installed now (and what changed); ``path``: the lockfile written."""
    direct = [p for p in lockfile.packages if p.range is not None]
    if args.json:
        print(
            json.dumps(
                {
                    "installed": [p.as_dict() for p in lockfile.packages],
                    "lockfile": str(path) if path is not None else None,
                }
            )
        )
        return 0
    for locked in direct:
        print(
            f"installed {locked.name} {locked.version}{_was(locked, before)} ({locked.distribution})"
        )
    pulled = len(lockfile.packages) - len(direct)
    if pulled:
        print(f"installed {pulled} more distribution(s) they depend on")
    if not direct:
        print("no dependencies to install")
    if path is not None:
        print(f"wrote {path}")
    return 0


def _was(locked: Any, before: Any) -> str:
    """`` (was V)`` when the lockfile ``before`` had another version of ``locked``."""
    old = before.direct(locked.name) if before is not None else None
    return f" (was {old.version})" if old is not None and old.version != locked.version else ""


def _install(args: argparse.Namespace, config: Path) -> int:
    from bundle.installer import install, resolve
    from bundle.lockfile import LOCKFILE, Lockfile, differences, read_lockfile

    dependencies, document = _dependencies(config)
    pip = _pip(args, document)
    path = config.parent / LOCKFILE
    lockfile = read_lockfile(path)
    if args.frozen_lockfile:
        if lockfile is None and not dependencies:
            return _report(args, Lockfile(()), None)
        if lockfile is None:
            return fail(
                args,
                ExitCode.VALIDATION,
                f"--frozen-lockfile: there is no {path}",
                "run `goondan package install` without it, and commit the lockfile",
            )
        found = differences(dependencies, lockfile)
        if found:
            return fail(
                args,
                ExitCode.VALIDATION,
                f"--frozen-lockfile: {LOCKFILE} differs from the Package document:\n  "
                + "\n  ".join(found),
                "run `goondan package install` without --frozen-lockfile, and commit the lockfile",
            )
        install(lockfile, pip)
        return _report(args, lockfile, None)
    if lockfile is not None and not differences(dependencies, lockfile):
        install(lockfile, pip)
        return _report(args, lockfile, None)
    resolved = resolve(dependencies, pip, _pins(lockfile, dependencies))
    resolved.write(path)
    install(resolved, pip)
    return _report(args, resolved, path, lockfile)


def _pins(lockfile: Any, dependencies: list[Any], except_name: str | None = None) -> dict[str, str]:
    """Locked versions kept: those of dependencies whose range did not change."""
    if lockfile is None:
        return {}
    pins: dict[str, str] = {}
    for dependency in dependencies:
        locked = lockfile.direct(dependency.name)
        kept = locked is not None and locked.range == dependency.range
        if kept and locked is not None and dependency.name != except_name:
            pins[dependency.distribution] = locked.version
    return pins


def _update(args: argparse.Namespace, config: Path) -> int:
    from bundle.installer import install, resolve
    from bundle.lockfile import LOCKFILE, read_lockfile

    dependencies, document = _dependencies(config)
    if args.name is not None and args.name not in {d.name for d in dependencies}:
        return fail(
            args,
            ExitCode.USAGE,
            f"{args.name} is not a dependency of {config}",
            f"add it with `goondan package add {args.name}`",
        )
    path = config.parent / LOCKFILE
    lockfile = read_lockfile(path)
    pins = _pins(lockfile, dependencies, args.name) if args.name is not None else {}
    resolved = resolve(dependencies, _pip(args, document), pins)
    resolved.write(path)
    install(resolved, _pip(args, document))
    return _report(args, resolved, path, lockfile)


def _add(args: argparse.Namespace, config: Path) -> int:
    from bundle.installer import install, resolve
    from bundle.lockfile import LOCKFILE, read_lockfile
    from bundle.package_doc import set_dependency
    from bundle.packages import Dependency
    from bundle.spec_base import PACKAGE_NAME
    from bundle.spec_package import PackageDependency

    at = args.spec.find("@", 1)  # a scope's @ is the first character
    name, range_ = (args.spec, "") if at < 0 else (args.spec[:at], args.spec[at + 1 :])
    if not PACKAGE_NAME.match(name):
        return fail(
            args,
            ExitCode.USAGE,
            f"{name!r} is not a package name",
            "write @scope/name or name, lowercase, optionally @RANGE",
        )
    dependencies, document = _dependencies(config)
    pip = _pip(args, document)
    if not range_ or args.exact:
        range_ = _latest_range(args, name, range_, pip)
    distribution = args.distribution
    if distribution is None:  # keep a distribution the document already names
        distribution = _named_distribution(document, name)
    dependency = Dependency.of(
        PackageDependency(name=name, version=range_, distribution=distribution)
    )
    dependencies = [d for d in dependencies if d.name != name]
    if not dependency.builtin:
        dependencies.append(dependency)
    path = config.parent / LOCKFILE
    lockfile = read_lockfile(path)
    resolved = resolve(dependencies, pip, _pins(lockfile, dependencies))
    set_dependency(config, name, range_, args.distribution)
    print(f"added {name} {range_} to {config}", file=sys.stderr if args.json else sys.stdout)
    resolved.write(path)
    install(resolved, pip)
    return _report(args, resolved, path, lockfile)


def _named_distribution(document: Any, name: str) -> str | None:
    """The distribution the document already names for dependency ``name``, if any."""
    old = next((d for d in document.spec.dependencies if d.name == name), None)
    return old.distribution if old is not None else None


def _latest_range(args: argparse.Namespace, name: str, range_: str, pip: Any) -> str:
    """The range ``add`` writes for the newest version in ``range_``: that version with
    ``--exact``, else a caret range from it."""
    from bundle.installer import latest_version
    from bundle.packages import Dependency
    from bundle.ranges import caret
    from bundle.spec_package import PackageDependency

    given = PackageDependency(name=name, version=range_ or "*", distribution=args.distribution)
    version = latest_version(Dependency.of(given), pip)
    return version if args.exact else caret(version)


_ACTIONS = {"add": _add, "install": _install, "update": _update}


def _publish(args: argparse.Namespace) -> int:
    from bundle.publish import PublishError, build, goondan_packages, upload

    exits = {"extra": ExitCode.CONFIG, "package": ExitCode.VALIDATION, "auth": ExitCode.AUTH}
    exits["network"] = ExitCode.NETWORK
    project = Path(args.path)
    try:
        with tempfile.TemporaryDirectory(prefix="goondan-publish-") as outdir:
            files = build(project, Path(outdir), isolation=not args.no_build_isolation)
            packages = [p for f in files if f.suffix == ".whl" for p in goondan_packages(f)]
            names = ", ".join(f.name for f in files)
            if args.dry_run:
                _show_dry_run(args, packages, names)
                return 0
            upload(files, args.registry, os.environ)
    except PublishError as exc:
        return fail(args, exits.get(exc.kind, ExitCode.INTERNAL), str(exc))
    if args.json:
        print(json.dumps({"packages": packages, "files": names.split(", ")}))
    else:
        print(f"published {', '.join(packages)}: {names}")
    return 0


def _show_dry_run(args: argparse.Namespace, packages: list[str], names: str) -> None:
    where = args.registry or os.environ.get("TWINE_REPOSITORY_URL") or "PyPI"  # environment
    if args.json:
        print(json.dumps({"packages": packages, "files": names.split(", ")}))
    else:
        print(f"would upload {names} ({', '.join(packages)}) to {where}")
