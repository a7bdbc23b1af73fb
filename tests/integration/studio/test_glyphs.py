"""Every icon the studio draws is a character the fonts beside the system's Chromium have: a
glyph no font holds renders as an empty box (the pause sign once did)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from tests.support.studio import chromium_path

STATIC = Path(__file__).resolve().parents[3] / "orchestrator" / "studio" / "static"
ICON_TABLES = re.compile(r"(?:STATUS_ICONS = \{|const icon = \{)(.*?)\}", re.DOTALL)
GLYPH = re.compile(r'"([^"\x00-\x7f])"')


def icons() -> set[str]:
    """The non-ASCII characters of the studio's icon tables (in any of its modules)."""
    text = "\n".join(path.read_text() for path in sorted(STATIC.glob("*.js")))
    return {glyph for table in ICON_TABLES.findall(text) for glyph in GLYPH.findall(table)}


def test_every_icon_is_in_a_font_the_browser_has() -> None:
    chromium_path()  # the browser, and so its fonts (fails under GOONDAN_REQUIRE_BROWSER)
    fc_list = shutil.which("fc-list")
    assert fc_list is not None, "fontconfig comes with the browser"
    found = icons()
    assert len(found) >= 10  # both tables were read
    missing = []
    for glyph in sorted(found):
        fonts = subprocess.run(
            [fc_list, f":charset={ord(glyph):x}", "family"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        if not fonts.strip():
            missing.append(f"{glyph} (U+{ord(glyph):04X})")
    assert missing == []
