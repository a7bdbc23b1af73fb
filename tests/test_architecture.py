"""The import arrows of DESIGN.md, pinned: each package imports only the packages below it.

``goondan → (none)``; ``tools_base, bundle, ipc → goondan``; ``agent_process`` and
``connector_process → bundle, ipc, tools_base, goondan``; ``orchestrator → bundle, ipc,
goondan``. Every module of every package is read with :mod:`ast`, so an import counts wherever
it is written: at the top, inside a function, under ``if TYPE_CHECKING:``; relative imports are
resolved against the module's package.

Entry points. The orchestrator starts its children by naming their code, not by importing it:
``"agent_process.main:serve"`` handed to a child, ``"agent_process.main"`` imported in the fork
server, ``[sys.executable, "-m", "tools_base.sandbox", ...]``. Such a string is recognised when
the whole constant is a dotted name, optionally followed by ``:attribute``, whose module exists
in the repository. It is an arrow like any import, allowed only where :data:`ENTRY_POINTS` lists
the pair: the code runs in the child process, never in the one that names it. What ``init``
writes into a user's swarm (``orchestrator/templates/``) is the user's code and not ours.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from ipc.runtime_events import PROCESS_FAMILY, EventType, event_family, lifecycle_kind

ROOT = Path(__file__).resolve().parents[1]

ARROWS: dict[str, frozenset[str]] = {
    "goondan": frozenset(),
    "tools_base": frozenset({"goondan"}),
    "bundle": frozenset({"goondan"}),
    "ipc": frozenset({"goondan"}),
    "agent_process": frozenset({"bundle", "ipc", "tools_base", "goondan"}),
    "connector_process": frozenset({"bundle", "ipc", "tools_base", "goondan"}),
    "orchestrator": frozenset({"bundle", "ipc", "goondan"}),
}
"""Which packages each package may import (itself always)."""

ENTRY_POINTS: dict[str, frozenset[str]] = {
    # the agent and connector children, the fork server's preloaded runtime (the agent entry
    # point and the @goondan/base tools it loads), and the tool runtime's own commands run as
    # `python -m` children: the sandbox probe and a tool module's schema derivation
    "orchestrator": frozenset({"agent_process", "connector_process", "tools_base"}),
}
"""Which packages each package may start by a named entry point, beyond :data:`ARROWS`."""

EXCEPTED = [ROOT / "orchestrator" / "templates"]
"""User code that ``init`` writes into a new swarm."""

DOTTED = re.compile(r"^(?P<module>[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+)(?::[A-Za-z_]\w*)?$")


def is_module(name: str) -> bool:
    """Whether ``name`` is a module or package of the repository."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def arrows_of(path: Path, source: str) -> list[tuple[int, str, bool]]:
    """``(line, module, by_entry_point)`` for every module ``source`` (the text of ``path``)
    imports or names as an entry point."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]  # the same for a module and for a package's __init__
    found: list[tuple[int, str, bool]] = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, False) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package[: len(package) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            found.append((node.lineno, base, False))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = DOTTED.match(node.value)
            if match and is_module(match.group("module")):
                found.append((node.lineno, match.group("module"), True))
    return sorted(found)


def forbidden(package: str, module: str, by_entry_point: bool) -> str | None:
    """The arrow ``package → module`` breaks, or ``None`` when DESIGN.md allows it."""
    target = module.split(".")[0]
    if target not in ARROWS or target == package or target in ARROWS[package]:
        return None  # the standard library, a third party, the package itself, or allowed
    if by_entry_point and target in ENTRY_POINTS.get(package, frozenset()):
        return None
    how = "entry point" if by_entry_point else "import"
    return f"{package} → {target} ({how} of {module})"


def modules(package: str) -> list[Path]:
    return [
        path
        for path in sorted((ROOT / package).rglob("*.py"))
        if not any(path.is_relative_to(excepted) for excepted in EXCEPTED)
    ]


def test_every_package_imports_only_what_its_arrows_allow() -> None:
    offending: list[str] = []
    for package in ARROWS:
        files = modules(package)
        assert files, f"no module found in {package}/"
        for path in files:
            for line, module, by_entry_point in arrows_of(path, path.read_text()):
                arrow = forbidden(package, module, by_entry_point)
                if arrow:
                    offending.append(f"{path.relative_to(ROOT)}:{line}: {arrow}")
    assert not offending, "imports against the arrows of DESIGN.md:\n" + "\n".join(offending)


def test_the_check_sees_each_form_of_import() -> None:
    here = ROOT / "orchestrator" / "wing" / "probe.py"
    source = (
        "from typing import TYPE_CHECKING\n"
        "import agent_process.main\n"
        "from ..connector_process import main\n"
        "from . import daemon\n"
        "if TYPE_CHECKING:\n"
        "    from tools_base import ToolContext\n"
        "def later():\n"
        "    from goondan.errors import CONFIG\n"
        "ENTRY = 'agent_process.main:serve'\n"
        "COMMAND = ['-m', 'tools_base.sandbox']\n"
        "NOT_A_MODULE = 'goondan.yaml'\n"
    )
    found = arrows_of(here, source)
    assert found == [
        (1, "typing", False),
        (2, "agent_process.main", False),
        (3, "orchestrator.connector_process", False),
        (4, "orchestrator.wing", False),
        (6, "tools_base", False),
        (8, "goondan.errors", False),
        (9, "agent_process.main", True),
        (10, "tools_base.sandbox", True),
    ]
    verdicts = [forbidden("orchestrator", module, entry) for _, module, entry in found]
    assert verdicts == [
        None,
        "orchestrator → agent_process (import of agent_process.main)",
        None,
        None,
        "orchestrator → tools_base (import of tools_base)",
        None,
        None,
        None,
    ]
    assert forbidden("ipc", "tools_base.sandbox", True) == (
        "ipc → tools_base (entry point of tools_base.sandbox)"
    )
    assert (
        forbidden("goondan", "bundle.loader", False) == "goondan → bundle (import of bundle.loader)"
    )


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def orchestrator_modules_in(source: str) -> set[str]:
    """The modules of ``orchestrator/`` that ``source`` imports, in any form and wherever
    (``from orchestrator.http import metrics`` counts as ``orchestrator.http.metrics``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        found |= {n for n in names if n.startswith("orchestrator") and is_module(n)}
    return found


def orchestrator_imports() -> dict[str, set[str]]:
    """Each module of ``orchestrator/`` → the modules of ``orchestrator/`` it imports."""
    return {
        _module_name(p): orchestrator_modules_in(p.read_text()) for p in modules("orchestrator")
    }


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        for target in graph.get(todo.pop(), set()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_faces_reach_the_daemon_only_through_its_operations() -> None:
    """The HTTP API, its metrics and the studio see the swarm as ``SwarmOperations``: none of
    their modules imports the daemon, not even under ``TYPE_CHECKING`` nor through another
    module, so ``daemon → http`` is the only arrow between them (no import cycle)."""
    graph = orchestrator_imports()
    faces = [m for m in graph if m.startswith(("orchestrator.http", "orchestrator.studio"))]
    assert {"orchestrator.http.app", "orchestrator.http.metrics"} <= set(faces)
    offending = sorted(m for m in faces if "orchestrator.daemon" in reachable(graph, m))
    assert not offending, f"modules reaching orchestrator.daemon: {offending}"
    assert "orchestrator.daemon" not in reachable(graph, "orchestrator.operations")


def test_the_cycle_check_sees_every_form_of_import() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from orchestrator import daemon\n"
        "def later():\n"
        "    import orchestrator.watch\n"
        "from orchestrator.http.metrics import SwarmMetrics\n"
    )
    assert orchestrator_modules_in(source) == {
        "orchestrator",
        "orchestrator.daemon",
        "orchestrator.watch",
        "orchestrator.http.metrics",
    }
    graph = {
        "orchestrator.daemon": {"orchestrator.http.app"},
        "orchestrator.http.app": {"orchestrator.watch"},
        "orchestrator.watch": {"orchestrator.daemon"},
    }
    assert "orchestrator.daemon" in reachable(graph, "orchestrator.http.app")


# -- event types are named, never spelled --------------------------------------------------------

EVENT_HOMES = frozenset(
    {
        ROOT / "ipc" / "runtime_events" / "types.py",
        ROOT / "goondan" / "state_files" / "eventlog.py",  # the log's header line is its format's
        ROOT / "goondan" / "handoff_events.py",  # tools_base builds handoffs, may not import ipc
    }
)
"""Where an event type is spelled: ``EventType`` and the ground-floor constants it names."""
EVENT_DOORS = frozenset({"lifecycle", "_lifecycle", "record", "emit", "_note"})
"""Calls that take an event: a lifecycle kind spelled among their arguments names one."""


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _kinds_spelled(node: ast.AST, kinds: set[str]) -> list[ast.Constant]:
    """The lifecycle kinds ``node`` spells where only an event's kind can be meant."""
    if isinstance(node, ast.Call) and _called(node) in EVENT_DOORS:
        near: list[ast.expr] = [*node.args, *(keyword.value for keyword in node.keywords)]
    elif isinstance(node, ast.Set | ast.List | ast.Tuple):
        near = list(node.elts)
    elif isinstance(node, ast.Compare) and any(
        isinstance(side, ast.Attribute) and side.attr == "type"
        for side in (node.left, *node.comparators)
    ):
        near = [node.left, *node.comparators]
    else:
        return []
    spelled = [n for n in near if isinstance(n, ast.Constant) and n.value in kinds]
    table = isinstance(node, ast.Set | ast.List | ast.Tuple)
    return spelled if len(spelled) > 1 or not table else []


def bare_event_types(paths: list[Path]) -> list[str]:
    """``path:line: text`` for each event type spelled in ``paths`` (outside its home): a whole
    type (``"turn.started"``); or a lifecycle kind (``"spawned"`` of ``process.spawned``) handed
    to an event door, gathered in a table with another, or compared with an event's ``type``.
    A kind alone elsewhere (``"ready"`` is also an IPC kind) is some other word."""
    types = {member.value for member in EventType}
    kinds = {lifecycle_kind(t) for t in EventType if event_family(t) == PROCESS_FAMILY}
    found: list[str] = []
    for path in paths:
        where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else Path(path.name)
        spelled: dict[int, ast.Constant] = {}
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and node.value in types:
                spelled[id(node)] = node
            spelled.update((id(kind), kind) for kind in _kinds_spelled(node, kinds))
        ordered = sorted(spelled.values(), key=lambda n: (n.lineno, n.col_offset))
        found += [f"{where}:{node.lineno}: {node.value}" for node in ordered]
    return found


def test_event_types_are_named_not_spelled_lifecycle_kinds_included() -> None:
    """A runtime event type is an ``EventType`` member and a lifecycle event a struct of
    ``ipc.runtime_events``: a misspelt one is a type error, never a ``RawEvent`` in the log."""
    paths = [path for package in ARROWS for path in modules(package) if path not in EVENT_HOMES]
    assert len(paths) > 100
    assert bare_event_types(paths) == []


def test_the_event_type_check_finds_each_spelling(tmp_path: Path) -> None:
    planted = tmp_path / "emitter.py"
    planted.write_text(
        'record("turn.started", agent)\n'
        'self.events.lifecycle("config_applied", "orchestrator", restarted=[])\n'
        'self._lifecycle("exited", handle, expected=True)\n'
        'COUNTED = frozenset({"spawned", "ready"})\n'
        'crashed = event.type == "process.exited" or event.type == "exited"\n'
    )
    clean = tmp_path / "named.py"
    clean.write_text(
        "record(EventType.TURN_STARTED, agent)\n"
        'self.events.lifecycle(ProcessConfigAppliedEvent(restarted=[]), "orchestrator")\n'
        'if handle.status == "ready" and body.kind == "ready":\n'
        '    row = {"spawned": answer.spawned}\n'
    )
    assert bare_event_types([planted, clean]) == [
        "emitter.py:1: turn.started",
        "emitter.py:2: config_applied",
        "emitter.py:3: exited",
        "emitter.py:4: spawned",
        "emitter.py:4: ready",
        "emitter.py:5: process.exited",
        "emitter.py:5: exited",
    ]


def any_in_signatures(source: str) -> list[str]:
    """Where ``Any`` (or ``typing.Any``) appears in an annotation of ``source``: a parameter,
    a return type or an attribute."""
    found: list[str] = []

    def names_any(annotation: ast.expr | None) -> bool:
        if annotation is None:
            return False
        if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
            return bool(re.search(r"\bAny\b", annotation.value))
        return any(
            (isinstance(node, ast.Name) and node.id == "Any")
            or (isinstance(node, ast.Attribute) and node.attr == "Any")
            for node in ast.walk(annotation)
        )

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            arguments = node.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            every += [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
            if names_any(node.returns) or any(names_any(a.annotation) for a in every):
                found.append(f"line {node.lineno}: {node.name}")
        elif isinstance(node, ast.AnnAssign) and names_any(node.annotation):
            found.append(f"line {node.lineno}: {ast.unparse(node.target)}")
    return found


def test_the_operations_protocol_and_its_answers_name_no_any() -> None:
    """What the faces may ask of the swarm, and what it answers, is typed: no ``Any`` in any
    signature of the protocol, nor in any field of an answer."""
    for name in ("protocol.py", "answers.py"):
        source = (ROOT / "orchestrator" / "operations" / name).read_text()
        assert any_in_signatures(source) == [], name


def test_the_any_check_sees_each_place_of_an_annotation() -> None:
    planted = (
        "from typing import Any\n"
        "import typing\n"
        "class P:\n"
        "    field: dict[str, Any]\n"
        "    def a(self, x: 'list[Any]') -> None: ...\n"
        "    def b(self, **fields: typing.Any) -> None: ...\n"
        "    async def c(self) -> Any: ...\n"
        "    def d(self, x: int) -> dict[str, object]: ...\n"
    )
    assert [hit.split(": ")[1] for hit in any_in_signatures(planted)] == ["field", "a", "b", "c"]


def imports_of(name: str, is_package: bool, source: str, known: set[str]) -> set[str]:
    """The modules of ``known`` that module ``name`` (a package's ``__init__`` when
    ``is_package``) imports, in any form and wherever it is written (under ``TYPE_CHECKING``,
    inside a function, relative): ``from a import b`` counts as ``a.b`` when that is a module,
    else as ``a``; any other name counts as the longest module of ``known`` it lies in."""

    def within(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if is_package else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {within(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if whole in known else within(base))
    return {module for module in found if module is not None and module != name}


def circles_in(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle of ``graph`` (a strongly connected set of two modules or more),
    each sorted, found by Tarjan's algorithm without recursion."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph.get(target, set())))))
                elif target in on_stack:
                    low[module] = min(low[module], index[target])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def runtime_import_graph() -> dict[str, set[str]]:
    """Each module of every package of :data:`ARROWS` → the modules of those packages it
    imports."""
    files = {_module_name(path): path for package in ARROWS for path in modules(package)}
    known = set(files)
    return {
        name: imports_of(name, path.name == "__init__.py", path.read_text(), known)
        for name, path in files.items()
    }


def test_no_import_circle_even_counting_type_only_imports() -> None:
    """No module reaches itself through its imports, not even through one written under
    ``TYPE_CHECKING`` or inside a function: a circle is a layer that is not one (a protocol
    in the lower module, or a third module both import, breaks it)."""
    found = circles_in(runtime_import_graph())
    assert not found, "import circles:\n" + "\n".join(" ↔ ".join(c) for c in found)


def test_the_circle_check_sees_a_planted_circle() -> None:
    sources = {
        "pkg": (True, ""),
        "pkg.low": (False, "import os\nfrom pkg import high\n"),
        "pkg.high": (
            False,
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .mid.deep import X\n",
        ),
        "pkg.mid": (True, "from . import deep\n"),
        "pkg.mid.deep": (False, "def later():\n    from ..low import thing\n"),
        "pkg.top": (False, "import pkg.low\nfrom pkg.mid.deep import Y\n"),
        "pkg.pair": (False, "from pkg.single import Z\n"),
        "pkg.single": (False, "from pkg.pair import W\n"),
    }
    known = set(sources)
    graph = {
        name: imports_of(name, is_package, source, known)
        for name, (is_package, source) in sources.items()
    }
    assert graph["pkg.low"] == {"pkg.high"}
    assert graph["pkg.high"] == {"pkg.mid.deep"}
    assert graph["pkg.mid"] == {"pkg.mid.deep"}
    assert graph["pkg.mid.deep"] == {"pkg.low"}
    assert circles_in(graph) == [
        ["pkg.high", "pkg.low", "pkg.mid.deep"],
        ["pkg.pair", "pkg.single"],
    ]
    del graph["pkg.mid.deep"]
    graph["pkg.pair"] = set()
    assert circles_in(graph) == []
