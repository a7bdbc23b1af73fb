"""The floor under ``benchmarks/http_api.py``: a bare Starlette app on uvicorn, in a process of
its own, answering what the daemon answers and doing nothing else.

It runs on the same server stack as the daemon's API (uvicorn's HTTP/1.1 protocol on the same
parser, uvloop) with none of ours: no connection guard, no middleware, no metrics, no agents. Each route reads the
request's JSON and answers the body the daemon gave to the same request (canned by the benchmark
in the file named on the command line), so the bytes in and out match and only our own work is
missing. ``POST /v1/chat/completions`` with ``"stream": true`` answers the daemon's chunks as an
SSE stream.

Run: ``python benchmarks/_http_floor.py ANSWERS.json PORT SOCKET``; prints ``ready PARSER`` once
both listeners accept. It serves on the parser uvicorn picks, as the daemon does (httptools where
installed, h11 otherwise); ``FLOOR_HTTP=h11`` (or ``httptools``) asks for one, to see what the
parser costs.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from uvicorn.protocols.http.h11_impl import H11Protocol


def build(answers: dict[str, Any]) -> Starlette:
    """The floor's app, answering ``answers`` (``request``, ``chat``, ``chunks``)."""

    async def request_turn(request: Request) -> Response:
        body = await request.json()
        if not isinstance(body, dict) or "input" not in body:
            return JSONResponse({"error": "input is missing"}, status_code=400)
        return JSONResponse(answers["request"])

    async def chat(request: Request) -> Response:
        body = await request.json()
        if not isinstance(body, dict) or "messages" not in body:
            return JSONResponse({"error": "messages is missing"}, status_code=400)
        if not body.get("stream"):
            return JSONResponse(answers["chat"])

        async def chunks() -> AsyncIterator[bytes]:
            for chunk in answers["chunks"]:
                yield chunk.encode()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/agents/{agent}/requests", request_turn, methods=["POST"]),
            Route("/v1/chat/completions", chat, methods=["POST"]),
        ]
    )


async def serve(answers: dict[str, Any], port: int, path: str) -> None:
    tcp = socket.create_server(("127.0.0.1", port))
    unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix.bind(path)
    unix.listen(128)
    config = uvicorn.Config(
        build(answers),
        http=os.environ.get("FLOOR_HTTP", "auto"),
        log_config=None,
        access_log=False,
        lifespan="off",
    )
    config.load()
    server = uvicorn.Server(config)  # no signal handlers: SIGTERM ends the process
    server.lifespan = config.lifespan_class(config)
    await server.startup(sockets=[tcp, unix])
    parser = "h11" if config.http_protocol_class is H11Protocol else "httptools"
    print("ready", parser, flush=True)
    await server.main_loop()


def main() -> None:
    answers = json.loads(Path(sys.argv[1]).read_text())
    uvloop.run(serve(answers, int(sys.argv[2]), sys.argv[3]))


if __name__ == "__main__":
    main()
