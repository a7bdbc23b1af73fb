"""Screenshots of the documentation site: ``python docs/site_screenshots.py``.

Builds the site (``mkdocs build --strict``) into a temporary directory, serves it on a loopback
port and saves three pages at 1280×900 with the system's Chromium: the home page, a generated
reference page (resources) and a guide (human approval), as ``docs/assets/site/<page>.png``
(``--out DIR`` writes them elsewhere). Needs the ``docs`` and ``dev`` extras (MkDocs, Playwright)
and Chromium (``apt-get install chromium``); ``--chromium PATH`` names another browser.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parents[1]
PAGES = {
    "home": "",
    "reference-resources": "reference/resources/",
    "guide-approvals": "guides/approvals/",
}
"""Each screenshot's name and the page it shows, relative to the site's root."""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def build(site: Path) -> None:
    """Build the site as it is published, failing on any warning."""
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT,
        check=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )


def photograph(site: Path, out: Path, chromium: str) -> list[Path]:
    """Serve ``site`` on loopback and save each of :data:`PAGES` into ``out``."""
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    saved = []
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=chromium, args=["--no-sandbox", "--disable-gpu"]
            )
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            for name, path in PAGES.items():
                page.goto(base + path, wait_until="networkidle")
                page.locator("article h1").first.wait_for()
                saved.append(out / f"{name}.png")
                page.screenshot(path=str(saved[-1]))
            browser.close()
    finally:
        server.shutdown()
    return saved


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "assets" / "site")
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as site:
        build(Path(site))
        for path in photograph(Path(site), args.out, args.chromium):
            print(path)


if __name__ == "__main__":
    main()
