"""``docs/site_screenshots.py`` builds the site and photographs its pages in a real Chromium."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

from tests.support.studio import chromium_path

ROOT = Path(__file__).resolve().parents[3]
PNG = b"\x89PNG\r\n\x1a\n"


def test_the_site_screenshots_are_taken_of_the_built_site(tmp_path: Path) -> None:
    browser = chromium_path()
    done = subprocess.run(
        [sys.executable, "docs/site_screenshots.py", "--out", str(tmp_path), "--chromium", browser],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=420,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["guide-approvals.png", "home.png", "reference-resources.png"]
    for name in names:
        head = (tmp_path / name).read_bytes()[:24]
        assert head[:8] == PNG
        assert struct.unpack(">II", head[16:24]) == (1280, 900)  # the IHDR's width and height
