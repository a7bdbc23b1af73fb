"""Loading entry modules and resolving their handlers."""

from __future__ import annotations

import dataclasses
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from bundle import EntryLoadError, load_entry_module, resolve_handlers
from bundle.entry import SYNTHETIC_PREFIX, module_name_for

ROOT = Path(__file__).resolve().parents[3]
FIXTURES = ROOT / "tests" / "fixtures" / "bundles"


@pytest.fixture
def clean_modules() -> Iterator[None]:
    """Forget the entry modules a test loaded (only those: stdlib imports stay cached)."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith((SYNTHETIC_PREFIX, "shadowpkg")):
            del sys.modules[name]


def module(tmp_path: Path, source: str, name: str = "tool.py") -> Path:
    path = tmp_path / name
    path.write_text(source)
    return path


@pytest.mark.usefixtures("clean_modules")
def test_a_loose_file_loads_under_a_synthetic_name_once(tmp_path: Path) -> None:
    path = module(tmp_path, "handlers = {'say': print}\n")
    first = load_entry_module(path)
    assert first.__name__.startswith(SYNTHETIC_PREFIX)
    assert sys.modules[first.__name__] is first
    assert load_entry_module(path) is first
    assert load_entry_module(tmp_path / "." / "tool.py") is first  # same file, same module


@pytest.mark.usefixtures("clean_modules")
def test_two_files_with_the_same_name_are_two_modules(tmp_path: Path) -> None:
    a = module(tmp_path, "X = 'a'\n")
    (tmp_path / "other").mkdir()
    b = module(tmp_path / "other", "X = 'b'\n")
    assert load_entry_module(a).X == "a"
    assert load_entry_module(b).X == "b"


@pytest.mark.usefixtures("clean_modules")
def test_dataclasses_and_pickling_work_inside_a_loose_module(tmp_path: Path) -> None:
    path = module(
        tmp_path,
        "import dataclasses\n@dataclasses.dataclass\nclass Point:\n    x: int\n",
    )
    loaded = load_entry_module(path)
    point = loaded.Point(3)
    assert dataclasses.asdict(point) == {"x": 3}
    assert pickle.loads(pickle.dumps(point)) == point


def test_a_module_in_an_importable_package_is_imported_by_its_dotted_name() -> None:
    import tools_base.tools.bash as bash

    path = Path(bash.__file__)
    assert module_name_for(path) == "tools_base.tools.bash"
    assert load_entry_module(path) is bash


def test_a_file_outside_any_package_has_no_dotted_name(tmp_path: Path) -> None:
    assert module_name_for(module(tmp_path, "")) is None
    assert module_name_for(FIXTURES / "echo_tool.py") is None  # fixtures/ is no package


@pytest.mark.usefixtures("clean_modules")
def test_a_package_not_on_sys_path_is_loaded_from_its_file(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    path = module(tmp_path / "pkg", "VALUE = 7\n")
    assert module_name_for(path) is None
    assert load_entry_module(path).VALUE == 7


@pytest.mark.usefixtures("clean_modules")
def test_a_shadowed_dotted_name_falls_back_to_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "shadowpkg").mkdir()
    (tmp_path / "shadowpkg" / "__init__.py").write_text("")
    path = module(tmp_path / "shadowpkg", "WHO = 'file'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    impostor = ModuleType("shadowpkg.tool")
    impostor.__file__ = "/somewhere/else/tool.py"
    monkeypatch.setitem(sys.modules, "shadowpkg.tool", impostor)
    assert load_entry_module(path).WHO == "file"


@pytest.mark.parametrize(
    ("source", "raised"),
    [
        ("raise RuntimeError('broken tool')\n", "RuntimeError: broken tool"),
        ("import sys\nsys.exit(3)\n", "SystemExit: 3"),
        ("def oops(:\n", "SyntaxError"),
        ("import no_such_module_for_goondan\n", "ModuleNotFoundError"),
    ],
)
@pytest.mark.usefixtures("clean_modules")
def test_import_failures_become_entry_load_errors(tmp_path: Path, source: str, raised: str) -> None:
    path = module(tmp_path, source)
    with pytest.raises(EntryLoadError) as error:
        load_entry_module(path)
    assert error.value.code == "E_CONFIG_ENTRY_LOAD_FAILED"
    assert raised in str(error.value)
    assert str(path) in str(error.value)
    assert not [m for m in sys.modules.values() if getattr(m, "__file__", None) == str(path)]


@pytest.mark.usefixtures("clean_modules")
def test_keyboard_interrupt_is_not_swallowed(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt):
        load_entry_module(module(tmp_path, "raise KeyboardInterrupt\n"))


def test_a_missing_entry_file(tmp_path: Path) -> None:
    with pytest.raises(EntryLoadError) as error:
        load_entry_module(tmp_path / "absent.py")
    assert error.value.code == "E_CONFIG_ENTRY_NOT_FOUND"


# -- resolve_handlers --------------------------------------------------------------------------


def fake_module(**attributes: object) -> ModuleType:
    mod = ModuleType("fake")
    mod.__file__ = "/tools/fake.py"
    for name, value in attributes.items():
        setattr(mod, name, value)
    return mod


def say(ctx: object, input: object) -> str:
    return "hi"


def test_handlers_without_config() -> None:
    mod = fake_module(handlers={"say": say, "note": "not callable"})
    assert resolve_handlers(mod, {}) == {"say": say}


def test_configure_is_used_when_there_is_config() -> None:
    seen: list[dict[str, object]] = []

    def configure(config: dict[str, object]) -> dict[str, object]:
        seen.append(config)
        return {"say": say}

    mod = fake_module(configure=configure, handlers={})
    assert resolve_handlers(mod, {"greeting": "hey"}) == {"say": say}
    assert seen == [{"greeting": "hey"}]


@pytest.mark.parametrize(
    ("attributes", "config", "code", "words"),
    [
        ({}, {}, "E_CONFIG_HANDLER_MISSING", "does not export `handlers`"),
        ({"handlers": [say]}, {}, "E_CONFIG_HANDLER_MISSING", "not list"),
        ({"handlers": {"say": say}}, {"a": 1}, "E_CONFIG_HANDLER_MISSING", "no configure"),
        (
            {"configure": lambda config: [say]},
            {"a": 1},
            "E_CONFIG_HANDLER_MISSING",
            "configure(config) of /tools/fake.py must give a dict",
        ),
    ],
)
def test_handler_problems(
    attributes: dict[str, object], config: dict[str, object], code: str, words: str
) -> None:
    with pytest.raises(EntryLoadError) as error:
        resolve_handlers(fake_module(**attributes), config)
    assert error.value.code == code
    assert words in str(error.value)
    assert "/tools/fake.py" in str(error.value)


def test_a_value_error_from_configure_is_a_config_problem() -> None:
    def configure(config: dict[str, object]) -> dict[str, object]:
        raise ValueError("unknown config keys: ['volume']")

    with pytest.raises(EntryLoadError) as error:
        resolve_handlers(fake_module(configure=configure), {"volume": 11})
    assert error.value.code == "E_CONFIG_SCHEMA_INVALID"
    assert "unknown config keys: ['volume']" in str(error.value)


def test_any_other_error_from_configure_is_a_load_failure() -> None:
    def configure(config: dict[str, object]) -> dict[str, object]:
        raise KeyError("boom")

    with pytest.raises(EntryLoadError) as error:
        resolve_handlers(fake_module(configure=configure), {"a": 1})
    assert error.value.code == "E_CONFIG_ENTRY_LOAD_FAILED"
    assert "KeyError" in str(error.value)


def test_the_sdk_config_error_is_a_value_error() -> None:
    from tools_base import ToolConfigError

    loaded = load_entry_module(FIXTURES / "configurable.py")
    with pytest.raises(EntryLoadError) as error:
        resolve_handlers(loaded, {"volume": 11})
    assert issubclass(ToolConfigError, ValueError)
    assert error.value.code == "E_CONFIG_SCHEMA_INVALID"
    assert set(resolve_handlers(loaded, {"greeting": "yo"})) == {"say"}


@pytest.mark.usefixtures("clean_modules")
def test_a_remembered_module_is_the_module_of_its_file(tmp_path: Path) -> None:
    """What the fork server does for the built-in tools: the file then loads as that module,
    until the module leaves ``sys.modules``."""
    from bundle.entry import remember_entry_module

    path = module(tmp_path, "VALUE = 'from the file'\n")
    stand_in = ModuleType(SYNTHETIC_PREFIX + "remembered")
    stand_in.__file__ = str(path)
    sys.modules[stand_in.__name__] = stand_in
    remember_entry_module(stand_in)
    assert load_entry_module(path) is stand_in
    del sys.modules[stand_in.__name__]
    assert load_entry_module(path).VALUE == "from the file"


@pytest.mark.usefixtures("clean_modules")
def test_a_file_that_is_gone_is_not_found_even_when_loaded_before(tmp_path: Path) -> None:
    path = module(tmp_path, "handlers = {}\n")
    load_entry_module(path)
    path.unlink()
    with pytest.raises(EntryLoadError, match="not found"):
        load_entry_module(path)
