"""Process log files: stamped lines, rotation by size, and reading the last lines back."""

from __future__ import annotations

import stat
from pathlib import Path

from orchestrator.cli.logs import known_processes, last_lines, resolve, stream_files
from orchestrator.process_logs import RotatingFile, file_name


def test_files_rotate_by_size_and_the_last_lines_span_them(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    log = RotatingFile(logs / file_name("agent:worker", "stderr"), max_bytes=200, kept=2)
    for n in range(20):
        log.write_line(f"line {n}\n".encode())
    log.close()
    names = sorted(path.name for path in logs.iterdir())
    assert names == [
        "agent:worker.stderr.log",
        "agent:worker.stderr.log.1",
        "agent:worker.stderr.log.2",
    ]
    assert all(stat.S_IMODE((logs / name).stat().st_mode) == 0o600 for name in names)
    assert all((logs / name).stat().st_size <= 200 for name in names)
    paths = stream_files(tmp_path, "agent:worker", "stderr")
    assert [p.name for p in paths] == [names[2], names[1], names[0]]
    tail = [line.decode().split(" ", 1)[1] for line in last_lines(paths, 7)]
    assert tail == [f"line {n}\n" for n in range(13, 20)]
    assert last_lines(paths, 0) == []


def test_names_never_leave_the_directory_and_short_names_resolve(tmp_path: Path) -> None:
    assert file_name("../x/y", "stdout") == "_x_y.stdout.log"
    (tmp_path / "logs").mkdir()
    for name in ("orchestrator", "agent:worker", "connector:tg", "agent:tg"):
        (tmp_path / "logs" / file_name(name, "stderr")).touch()
    known = known_processes(tmp_path)
    assert known == ["orchestrator", "agent:tg", "agent:worker", "connector:tg"]
    assert resolve("worker", known) == "agent:worker"
    assert resolve("tg", known) is None  # an agent and a connection: name the one meant
    assert resolve("connector:tg", known) == "connector:tg"
