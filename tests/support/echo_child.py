"""Child-process targets for channel tests (importable, so forkserver/spawn can start them)."""

from __future__ import annotations

import asyncio
import os
from multiprocessing.connection import Connection

from ipc import Channel, EventMessage


def echo(conn: Connection) -> None:
    """Echo every message back; ``payload.kind == "die"`` exits with code 1 at once."""

    async def main() -> None:
        channel = await Channel.open(conn, "parent")
        async for message in channel:
            if isinstance(message, EventMessage) and message.kind == "die":
                os._exit(1)
            if isinstance(message, EventMessage) and message.kind == "hold":
                await asyncio.sleep(float(message.payload["seconds"]))
            await channel.send(message)

    asyncio.run(main())


def garbage_then_echo(conn: Connection) -> None:
    """Write raw garbage into the pipe, then echo like :func:`echo`."""
    conn.send_bytes(b"\x00\xffnot a frame at all\xc0")
    os.write(conn.fileno(), b"random bytes \xde\xad\xbe\xef")
    echo(conn)
