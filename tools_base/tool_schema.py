"""``python -m tools_base.tool_schema MODULE[:FUNCTION] [--base DIR]...``: the ``exports``
entries a module's typed handlers describe, as one JSON object on stdout.

``goondan tool schema`` runs this in a child process: the Orchestrator does not import
``tools_base`` (DESIGN.md arrows), and importing the user's module there cannot end or wedge
the command. The answer is ``{"exports": [entry...], "file": path}``, or
``{"error": {"kind", "message"}}`` with exit status 2 (a malformed target), 3 (no such module
or function, or its import failed) or 4 (a hint with no JSON Schema).

``MODULE`` is a file (``tools/greet.py``, found relative to the current directory, then to each
``--base``, as a Tool's ``entry`` is relative to its YAML) or a dotted module name importable
from those directories. With ``:FUNCTION`` the entry is that function's (decorated with
``@tool`` or a plain typed function); without, one entry per ``@tool`` handler of the module's
``handlers``, named by its key.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from goondan.modules import dotted_name
from tools_base._tool import EXPORT_ATTR, ToolSignatureError, tool_export

TARGET_MALFORMED = 2
NOT_FOUND = 3
HINT_UNSUPPORTED = 4


class _Refused(Exception):
    def __init__(self, kind: str, message: str, status: int) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status


def describe(target: str, bases: list[Path]) -> dict[str, Any]:
    """The answer for ``target`` (see the module docstring); raises :class:`_Refused`."""
    module_part, _, function_part = target.partition(":")
    if not module_part or (":" in target and not function_part):
        raise _Refused(
            "target",
            f"{target!r} is not MODULE:FUNCTION (e.g. tools/greet.py:hello or tools.greet:hello)",
            TARGET_MALFORMED,
        )
    roots = [Path.cwd(), *bases]
    for root in reversed(roots):  # the current directory first
        if str(root) not in sys.path:
            sys.path.insert(0, str(root))
    module = _load(module_part, roots)
    if function_part:
        function = _attribute(module, module_part, function_part)
        exports = [_export(function, function_part)]
    else:
        exports = _module_exports(module, module_part)
    return {"exports": exports, "file": getattr(module, "__file__", None)}


def _load(module_part: str, roots: list[Path]) -> ModuleType:
    if module_part.endswith(".py") or "/" in module_part:
        candidates = [(root / module_part).resolve() for root in roots]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            looked = ", ".join(str(c) for c in dict.fromkeys(candidates))
            raise _Refused("module", f"no file {module_part} (looked at {looked})", NOT_FOUND)
        return _guarded(module_part, lambda: _load_file(path))
    return _guarded(module_part, lambda: importlib.import_module(module_part))


def _guarded(module_part: str, load: Any) -> ModuleType:
    try:
        module: ModuleType = load()
    except ModuleNotFoundError as exc:
        if exc.name and module_part.startswith(exc.name):
            raise _Refused(
                "module",
                f"no module {module_part!r} (name a file such as tools/greet.py, or a module "
                "importable from the current directory)",
                NOT_FOUND,
            ) from exc
        raise _Refused("import", _import_failed(module_part, exc), NOT_FOUND) from exc
    except ToolSignatureError as exc:
        raise _Refused("hint", str(exc), HINT_UNSUPPORTED) from exc
    except (Exception, SystemExit) as exc:
        raise _Refused("import", _import_failed(module_part, exc), NOT_FOUND) from exc
    return module


def _import_failed(module_part: str, exc: BaseException) -> str:
    return f"importing {module_part} raised {type(exc).__name__}: {exc}"


def _load_file(path: Path) -> ModuleType:
    """As the runtime loads a Tool's entry: by its dotted name when it lies in a package on
    ``sys.path``, else under a name of its own."""
    dotted = dotted_name(path)
    if dotted is not None:
        module = importlib.import_module(dotted)
        if Path(str(module.__file__)).resolve() == path:
            return module
    name = "goondan_tool_schema_" + hashlib.sha1(str(path).encode()).hexdigest()[:16]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise _Refused("module", f"{path} is not a Python module", NOT_FOUND)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pydantic models look their module up
    spec.loader.exec_module(module)
    return module


def _attribute(module: ModuleType, module_part: str, function_part: str) -> Any:
    found: Any = module
    for name in function_part.split("."):
        if not hasattr(found, name):
            known = sorted(
                n
                for n, v in vars(module).items()
                if callable(v)
                and not n.startswith("_")
                and getattr(v, "__module__", None) in (module.__name__, None)
            )
            hint = f" (it defines {', '.join(known)})" if known else ""
            raise _Refused(
                "function", f"{module_part} has no function {function_part!r}{hint}", NOT_FOUND
            )
        found = getattr(found, name)
    if not callable(found):
        raise _Refused(
            "function",
            f"{module_part}:{function_part} is a {type(found).__name__}, not a function",
            NOT_FOUND,
        )
    return found


def _export(function: Any, label: str, name: str | None = None) -> dict[str, Any]:
    try:
        entry = dict(tool_export(function))
    except ToolSignatureError as exc:
        raise _Refused("hint", str(exc), HINT_UNSUPPORTED) from exc
    if name is not None and name != entry.get("name"):
        entry = {"name": name, **{k: v for k, v in entry.items() if k != "name"}}
    return entry


def _module_exports(module: ModuleType, module_part: str) -> list[dict[str, Any]]:
    handlers = getattr(module, "handlers", None)
    if not isinstance(handlers, dict):
        raise _Refused(
            "function",
            f"{module_part} has no `handlers` dict; name the function: {module_part}:FUNCTION",
            NOT_FOUND,
        )
    exports = [
        _export(handler, str(key), name=str(key))
        for key, handler in handlers.items()
        if hasattr(handler, EXPORT_ATTR)
    ]
    if not exports:
        raise _Refused(
            "function",
            f"no handler in {module_part}'s `handlers` is a @tool one; decorate them, or name "
            f"a typed function: {module_part}:FUNCTION",
            NOT_FOUND,
        )
    return exports


def main(argv: list[str] | None = None) -> int:
    """Print the answer as one JSON object; the exit status as the module docstring says."""
    parser = argparse.ArgumentParser(prog="python -m tools_base.tool_schema")
    parser.add_argument("target", metavar="MODULE[:FUNCTION]")
    parser.add_argument(
        "--base", action="append", type=Path, default=[], help="also look for MODULE here"
    )
    args = parser.parse_args(argv)
    try:
        # What the user's module prints while imported must not mix with the answer.
        with contextlib.redirect_stdout(sys.stderr):
            answer = describe(args.target, [Path(b).resolve() for b in args.base])
    except _Refused as refused:
        print(json.dumps({"error": {"kind": refused.kind, "message": str(refused)}}))
        return refused.status
    print(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
