"""An empty folder to the first answer, with the README's first command line.

What a newcomer does, timed step by step. Each run copies the checkout's files (tracked and
untracked, none ignored: what a clone holds) into an empty temporary folder, then:

1. ``python3 -m venv .venv``, as the README's Quick start says (``venv_s``);
2. the README's first line, read from ``README.md`` itself and run as written in that folder
   with the venv active: its ``pip install`` part (``install_s``: resolving, downloading,
   building the editable wheel, installing; against PyPI, with this machine's pip
   configuration set aside, as on a fresh machine) and its ``python -m orchestrator run`` part
   (``answer_s``: until the offline example swarm's answer is printed, byte-compiling our
   modules on the way; ``run_s``: until the command ends, the swarm stopped; the answer is
   checked);
3. the same ``run`` again (``answer_again_s``: what the first answer costs once compiled).

``--cache cold`` (the default) gives each run an empty pip cache, as on a fresh machine;
``--cache warm`` first installs once, untimed, to fill a cache the timed runs then share.
``--phases`` adds ``--log`` to pip (which slows it a little) and splits ``install_s`` into its
phases from the log's timestamps: the build backend's own environment, the backend's hooks,
resolving and downloading, the editable wheel, unpacking and byte-compiling; and lists what was
downloaded, largest first, and what had no wheel.

``--quick`` touches no network: it checks the core dependencies of ``pyproject.toml`` against
what is installed (their count and every package they pull in), then times the first answer
with this interpreter in an empty folder holding only the example, every installed
distribution outside the core hidden from it (as if only the core were installed). CI runs it.

Run: ``python benchmarks/first_answer.py [--runs N] [--cache cold|warm] [--phases] [--json]``.
Exits non-zero on a wrong answer. Prints figures; gates nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from packaging.utils import canonicalize_name

from benchmarks._checks import WrongAnswer, expect
from tests.support.core_install import core_closure, core_only_site, core_requirements

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "Done. The worker reports: wrote 11 bytes to notes.txt"
TARGET_SECONDS = 15.0
"""The goal: from an empty folder to the first answer (venv, install and run)."""
STEP_SECONDS = 600
"""The most one step may take before the run is void (a stalled index, a hung daemon)."""
FIGURES = ("venv_s", "install_s", "answer_s", "run_s", "answer_again_s", "line_s", "total_s")
"""Per run: the venv; the line's install, its answer (from the run's start) and the run as a
whole (the swarm stopped too); the answer of a second run (compiled); install + answer; and
venv + install + answer, the figure of the target."""
PIP_SETTINGS_OF_THIS_MACHINE = (
    "PIP_FIND_LINKS",
    "PIP_INDEX_URL",
    "PIP_EXTRA_INDEX_URL",
    "PIP_CONSTRAINT",
    "PIP_NO_INDEX",
    "PIP_REQUIRE_VIRTUALENV",
)
"""Settings a fresh machine does not have (local wheel folders, mirrors, constraints)."""


def readme_line(root: Path = ROOT) -> str:
    """The first command line of the README's Quick start."""
    text = (root / "README.md").read_text()
    quick = text.split("[start:quick-start]", 1)[1]
    block = quick.split("```sh\n", 1)[1]
    return block.splitlines()[0].strip()


def line_parts(line: str) -> tuple[str, str]:
    """The line's install command and its run command."""
    parts = line.split(" && ")
    expect(
        len(parts) == 2
        and parts[0].startswith("pip install")
        and parts[1].startswith("python -m orchestrator run"),
        f"the README's first line is no longer 'pip install ... && python -m orchestrator run "
        f"...': {line!r}",
    )
    return parts[0], parts[1]


def copy_checkout(root: Path, into: Path) -> None:
    """The files a clone of ``root`` holds (with the changes not yet committed), into ``into``."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=root,
        capture_output=True,
        check=True,
    ).stdout
    for name in filter(None, listed.decode().split("\0")):
        source = root / name
        if not source.is_file():  # deleted, not yet committed
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def fresh_machine_env(venv: Path, cache: Path) -> dict[str, str]:
    """The environment of a shell where ``. .venv/bin/activate`` ran on a fresh machine: the
    venv first on ``PATH``, no pip configuration but its cache, no ``PYTHONPATH``."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in PIP_SETTINGS_OF_THIS_MACHINE and key not in ("PYTHONPATH", "PYTHONHOME")
    }
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["VIRTUAL_ENV"] = str(venv)
    env["PIP_CONFIG_FILE"] = os.devnull
    env["PIP_CACHE_DIR"] = str(cache)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def timed(command: str, cwd: Path, env: dict[str, str]) -> tuple[float, str]:
    """Seconds ``command`` took in a shell, and what it printed; a failure voids the run."""
    started = time.perf_counter()
    done = subprocess.run(
        ["sh", "-c", command],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STEP_SECONDS,
        check=False,
    )
    elapsed = time.perf_counter() - started
    expect(done.returncode == 0, f"{command!r} exited {done.returncode}: {done.stderr[-2000:]}")
    return elapsed, done.stdout


def answered(command: str, cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """Seconds until ``command`` printed the example's answer, and until it ended (the swarm
    stopped); the README's answer missing or a failure voids the run."""
    with tempfile.TemporaryFile("w+") as errors:
        started = time.perf_counter()
        child = subprocess.Popen(
            ["sh", "-c", command],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
        )
        watchdog = threading.Timer(STEP_SECONDS, child.kill)
        watchdog.start()
        answer_s = None
        printed = []
        try:
            assert child.stdout is not None  # for the type checker: piped above
            for line in child.stdout:
                printed.append(line)
                if answer_s is None and ANSWER in line:
                    answer_s = time.perf_counter() - started
            code = child.wait()
        finally:
            watchdog.cancel()
        ended_s = time.perf_counter() - started
        errors.seek(0)
        expect(code == 0, f"{command!r} exited {code}: {errors.read()[-2000:]}")
    expect(answer_s is not None, "".join(printed)[-500:])
    assert answer_s is not None  # for the type checker: expect raised otherwise
    return answer_s, ended_s


@dataclass
class Run:
    """One empty folder to its first answer."""

    venv_s: float
    install_s: float
    answer_s: float
    run_s: float
    answer_again_s: float
    packages: list[str]
    phases: dict[str, Any] | None

    def figures(self) -> dict[str, Any]:
        line_s = self.install_s + self.answer_s
        return {
            "venv_s": round(self.venv_s, 2),
            "install_s": round(self.install_s, 2),
            "answer_s": round(self.answer_s, 2),
            "run_s": round(self.run_s, 2),
            "answer_again_s": round(self.answer_again_s, 2),
            "line_s": round(line_s, 2),
            "total_s": round(self.venv_s + line_s, 2),
            "packages": len(self.packages),
            "phases": self.phases,
        }


def one_run(root: Path, line: str, cache: Path, *, phases: bool, pip_args: str = "") -> Run:
    """Copy the checkout into an empty folder and follow the README there (``pip_args``: more
    arguments for its ``pip install``, to compare a variant of the line)."""
    install, run = line_parts(line)
    install = f"{install} {pip_args}".strip()
    with tempfile.TemporaryDirectory(prefix="goondan-first-answer-") as scratch:
        folder = Path(scratch)
        copy_checkout(root, folder)
        env = fresh_machine_env(folder / ".venv", cache)
        python3 = shutil.which("python3") or sys.executable
        venv_s, _ = timed(f"{python3} -m venv .venv", folder, env)
        log = folder / "pip.log"
        if phases:
            install = f"{install} --log {log}"
        install_s, _ = timed(install, folder, env)
        answer_s, run_s = answered(run, folder, env)
        answer_again_s, _ = answered(run, folder, env)
        _, listed = timed("python -m pip list --format json", folder, env)
        packages = [
            p["name"]
            for p in json.loads(listed)
            if canonicalize_name(p["name"]) not in ("pip", "setuptools", "goondan-py")
        ]
        return Run(
            venv_s,
            install_s,
            answer_s,
            run_s,
            answer_again_s,
            packages,
            pip_phases(log) if phases else None,
        )


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3}) (.*)$")
_DOWNLOAD = re.compile(r"Downloading (\S+?)(?:\.whl|\.tar\.gz|\.zip) \(([\d.]+) ([kM]?B)\)")
_UNITS = {"B": 1 / 1024, "kB": 1.0, "MB": 1024.0}


def pip_phases(log: Path) -> dict[str, Any]:
    """Where a ``pip install --log`` spent its time, from the log's timestamps (seconds)."""
    marks: dict[str, float] = {}
    downloads: list[tuple[str, float]] = []
    no_wheel: list[str] = []
    first = last = None
    for raw in log.read_text(errors="replace").splitlines():
        matched = _STAMP.match(raw)
        if matched is None:
            continue
        at = datetime.strptime(matched[1], "%Y-%m-%dT%H:%M:%S,%f").timestamp()
        text = matched[2].strip()
        first = at if first is None else first
        last = at
        for key, needle in (
            ("build_env_started", "Installing build dependencies: started"),
            ("build_env_done", "Installing build dependencies: finished"),
            ("metadata_done", "Preparing editable metadata (pyproject.toml): finished"),
            ("wheel_started", "Building editable for"),
            ("wheel_done", "Created wheel for goondan-py"),
            ("install_started", "Installing collected packages"),
        ):
            if text.startswith(needle) and key not in marks:
                marks[key] = at
        if text.startswith("Building wheel for"):
            no_wheel.append(text.split()[3])
        download = _DOWNLOAD.search(text)
        if download is not None:
            downloads.append((download[1], float(download[2]) * _UNITS[download[3]]))
    if first is None or last is None:
        return {}

    def span(start: str, end: str) -> float | None:
        if start in marks and end in marks:
            return round(marks[end] - marks[start], 2)
        return None

    marks["first"], marks["last"] = first, last
    # Without build dependencies to install (the editable wheel), the hooks start at once.
    marks.setdefault("build_env_done", first)
    return {
        "build_env_s": span("build_env_started", "build_env_done"),
        "backend_hooks_s": span("build_env_done", "metadata_done"),
        "resolve_download_s": span("metadata_done", "wheel_started"),
        "editable_wheel_s": span("wheel_started", "wheel_done"),
        "unpack_compile_s": span("install_started", "last"),
        "logged_s": round(last - first, 2),
        "downloaded_kib": round(sum(size for _, size in downloads)),
        "largest": [
            [name, round(size)] for name, size in sorted(downloads, key=lambda d: -d[1])[:6]
        ],
        "no_wheel": no_wheel,
    }


def full(runs: int, cache_mode: str, phases: bool, pip_args: str = "") -> dict[str, Any]:
    line = readme_line()
    results: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="goondan-pip-cache-") as shared:
        if cache_mode == "warm":
            one_run(ROOT, line, Path(shared), phases=False)  # fills the cache, untimed
        for _ in range(runs):
            load = os.getloadavg()[0]
            if cache_mode == "warm":
                cache = Path(shared)
                results.append(one_run(ROOT, line, cache, phases=phases, pip_args=pip_args))
            else:
                with tempfile.TemporaryDirectory(prefix="goondan-pip-cache-") as empty:
                    results.append(
                        one_run(ROOT, line, Path(empty), phases=phases, pip_args=pip_args)
                    )
            results[-1].phases = {**(results[-1].phases or {}), "load_average_before": load}
    figures = [r.figures() for r in results]
    median = {key: round(statistics.median(f[key] for f in figures), 2) for key in FIGURES}
    return {
        "mode": "full",
        "readme_line": line,
        "pip_args": pip_args,
        "cache": cache_mode,
        "runs": figures,
        "median": median,
        "packages": sorted(results[-1].packages, key=str.lower),
        "target_total_s": TARGET_SECONDS,
        "load_average": [round(load, 2) for load in os.getloadavg()],
        "python": sys.version.split()[0],
    }


def quick() -> dict[str, Any]:
    """No network: the core list against what is installed, and the first answer with this
    interpreter, every non-core distribution hidden, in an empty folder."""
    line = readme_line()
    _, run = line_parts(line)
    requirements = core_requirements()
    try:
        closure = core_closure(requirements)
    except LookupError as exc:
        raise WrongAnswer(str(exc)) from None
    with tempfile.TemporaryDirectory(prefix="goondan-first-answer-") as scratch:
        folder = Path(scratch) / "empty"
        folder.mkdir()
        site = core_only_site(Path(scratch) / "site")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        # This checkout (whichever copy the venv's install points at), seeing only the core.
        env["PYTHONPATH"] = f"{site}{os.pathsep}{ROOT}"
        shutil.copy2(ROOT / "goondan.yaml.example", folder / "goondan.yaml.example")
        command = run.replace("python ", f"{sys.executable} ", 1)
        answer_s, run_s = answered(command, folder, env)
        answer_again_s, _ = answered(command, folder, env)
    return {
        "mode": "quick",
        "readme_line": line,
        "core_requirements": [str(r) for r in requirements],
        "core_packages": closure,
        "core_package_count": len(closure),
        "answer_s": round(answer_s, 2),
        "run_s": round(run_s, 2),
        "answer_again_s": round(answer_again_s, 2),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def _print_table(figures: dict[str, Any]) -> None:
    print(f"README line: {figures['readme_line']}")
    if figures["mode"] == "quick":
        print(f"core packages installed: {figures['core_package_count']}")
        print(
            f"first answer (installed venv, core only): {figures['answer_s']:.2f} s "
            f"(the command: {figures['run_s']:.2f} s), again {figures['answer_again_s']:.2f} s"
        )
        return
    print(f"pip cache: {figures['cache']}; packages installed: {len(figures['packages'])}")
    header = FIGURES
    print(" ".join(f"{h:>12}" for h in ("run", *header)))
    for number, run in enumerate(figures["runs"], 1):
        print(" ".join(f"{v:>12}" for v in (number, *(run[h] for h in header))))
    print(" ".join(f"{v:>12}" for v in ("median", *(figures["median"][h] for h in header))))
    print(f"target: empty folder -> first answer <= {figures['target_total_s']:g} s")
    for number, run in enumerate(figures["runs"], 1):
        if run["phases"]:
            print(f"run {number} phases: {json.dumps(run['phases'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--cache", choices=("cold", "warm"), default="cold")
    parser.add_argument("--phases", action="store_true", help="split pip's time (adds --log)")
    parser.add_argument(
        "--pip-args", default="", help="more arguments for pip install (to compare a variant)"
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--quick", action="store_true", help="no network (CI runs this)")
    args = parser.parse_args()
    try:
        figures = quick() if args.quick else full(args.runs, args.cache, args.phases, args.pip_args)
    except WrongAnswer as exc:
        print(f"wrong answer: {exc}", file=sys.stderr)
        sys.exit(1)
    if args.json:
        print(json.dumps(figures))
    else:
        _print_table(figures)


if __name__ == "__main__":
    main()
