"""A web page on another origin: what any web site the operator visits could try.

The page is served by a second loopback HTTP server on a port of its own, so to the browser
it is another origin than the daemon's API on loopback.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PAGE = b"""<!doctype html>
<title>somewhere else</title>
<script>
// What a page may try against a daemon at `api`: each outcome as text.
async function attempt(url, init) {
  try {
    const answer = await fetch(url, init);
    const body = answer.type === "opaque" ? "" : await answer.text();
    return `${answer.type} ${answer.status} ${body}`;
  } catch (error) {
    return `failed: ${error}`;
  }
}
// The probe's requests: simple ones, which a browser sends without asking first.
window.attack = async (api) => [
  await attempt(`${api}/v1/agents/worker/sends`, {
    method: "POST",
    mode: "no-cors",
    headers: {"Content-Type": "text/plain"},
    body: JSON.stringify({input: "write from-browser.txt written by a web page"}),
  }),
  await attempt(`${api}/v1/agents/coordinator/restart?fresh=1`, {method: "POST", mode: "no-cors"}),
  // The same as JSON: the browser asks the daemon first (a preflight).
  await attempt(`${api}/v1/agents/worker/requests`, {
    method: "POST",
    headers: {"Content-Type": "application/json"},
    body: JSON.stringify({input: "write from-browser.txt written by a web page"}),
  }),
];
// A page the operator allowed: a JSON request, its answer read.
window.ask = async (api, input) => attempt(`${api}/v1/agents/worker/requests`, {
  method: "POST",
  headers: {"Content-Type": "application/json"},
  body: JSON.stringify({input}),
});
</script>
"""


class _Page(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the test's output stays the test's


@contextmanager
def page_elsewhere() -> Iterator[str]:
    """The page's URL (``http://127.0.0.1:PORT/``) while a loopback server serves it."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def origin_of(url: str) -> str:
    """``http://host:port`` of ``url``."""
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.partition('/')[0]}"
