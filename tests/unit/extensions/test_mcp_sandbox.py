"""What of the machine an MCP stdio server's program is shown in the sandbox, worked out from its
command: the layouts of nvm's ``npx``, a venv's console script, ``uvx``, a binary at home."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tools_base.extensions._mcp_sandbox import find_program


def executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_npx_of_an_nvm_node_shows_that_node_installation(tmp_path: Path) -> None:
    node = tmp_path / "nvm" / "v20"
    executable(node / "bin" / "node", "\x7fELF")
    cli = executable(
        node / "lib" / "node_modules" / "npm" / "bin" / "npx-cli.js", "#!/usr/bin/env node\n"
    )
    (node / "bin" / "npx").symlink_to(os.path.relpath(cli, node / "bin"))
    program = find_program(
        "npx", ["-y", "@scope/server"], search_path=f"{node / 'bin'}:/usr/bin", cwd=str(tmp_path)
    )
    assert program.executable == str(node / "bin" / "npx")
    assert program.read_only == (str(node),)


def test_a_venv_console_script_shows_the_venv_its_interpreter_and_file_arguments(
    tmp_path: Path,
) -> None:
    base = tmp_path / "pythons" / "3.12"
    executable(base / "bin" / "python3.12", "\x7fELF")
    (base / "lib" / "python3.12").mkdir(parents=True)
    (base / "lib" / "python3.12" / "os.py").write_text("")
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base / 'bin'}\nversion = 3.12.1\n")
    (venv / "bin" / "python").symlink_to(base / "bin" / "python3.12")
    executable(venv / "bin" / "serve", f"#!{venv / 'bin' / 'python'}\nimport server\n")
    config = tmp_path / "etc" / "server.toml"
    config.parent.mkdir()
    config.write_text("")
    program = find_program(
        "serve",
        [str(config), str(tmp_path / "etc"), "relative.toml", str(tmp_path / "missing")],
        search_path=str(venv / "bin"),
        cwd=str(tmp_path),
    )
    assert program.executable == str(venv / "bin" / "serve")
    assert program.read_only == (str(config), str(base), str(venv))


def test_uvx_shows_the_uv_it_starts_and_no_more(tmp_path: Path) -> None:
    tools = tmp_path / "tools" / "bin"
    executable(tools / "uvx", "\x7fELF")
    executable(tools / "uv", "\x7fELF")
    program = find_program("uvx", ["mcp-server-fetch"], search_path=str(tools), cwd="/")
    assert program.read_only == (str(tools / "uv"), str(tools / "uvx"))


def test_a_program_in_a_home_bin_never_shows_the_whole_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    (home / "lib" / "node_modules").mkdir(parents=True)
    tool = executable(home / "bin" / "tool", "\x7fELF")
    monkeypatch.setenv("HOME", str(home))
    program = find_program("tool", [], search_path=str(home / "bin"), cwd="/")
    assert program.read_only == (str(tool),)


def test_system_programs_need_nothing_more_and_a_missing_one_is_named(tmp_path: Path) -> None:
    assert find_program("sh", [], search_path="/usr/bin:/bin", cwd="/").read_only == ()
    relative = executable(tmp_path / "srv" / "run")
    found = find_program("./srv/run", [], search_path="/usr/bin", cwd=str(tmp_path))
    assert found.executable == str(relative)
    with pytest.raises(FileNotFoundError, match="'no-such-server' is not an executable"):
        find_program("no-such-server", [], search_path=str(tmp_path), cwd="/")
