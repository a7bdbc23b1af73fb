"""What the sandbox's network proxy adds to one HTTPS request: a local TLS server (a
self-signed certificate made with ``cryptography``) answers ``GET /`` over a fresh connection,
directly and through a :class:`~tools_base.sandbox.NetworkProxy` (``CONNECT``, then TLS inside
the tunnel, as ``curl`` through ``HTTPS_PROXY`` does). The proxy's listeners arrive through its
handoff socket as the launcher sends them, here on this namespace's loopback; it is built with
an address check that admits loopback, for this measurement only. The two take turns request
by request, so drift and load hit them alike."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import logging
import socket
import ssl
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import structlog

from tools_base.sandbox import Connection, NetworkProxy
from tools_base.sandbox._netns import connect_handoff, send_listeners
from tools_base.sandbox._proxy import MAX_RECORDED

TARGET_ADDED_MS = 5.0
"""The most the proxy may add to one HTTPS request (median)."""
BODY = b"x" * 1024
KEYS = ["requests", "direct_ms", "proxied_ms", "added_ms", "direct_p90_ms", "proxied_p90_ms"]


class WrongAnswer(Exception):
    """A request did not get the server's answer."""


def _certificate(directory: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(BODY) + BODY
        )
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        pass
    finally:
        writer.close()


async def _request(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int) -> None:
    writer.write(f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    answer = await reader.read(-1)
    writer.close()
    if not answer.startswith(b"HTTP/1.1 200") or not answer.endswith(BODY):
        raise WrongAnswer(f"the TLS server's answer did not arrive: {answer[:60]!r}")


async def _proxy() -> tuple[NetworkProxy, int, list[Connection]]:
    records: list[Connection] = []
    proxy = NetworkProxy(check=lambda address: None, sink=records.append, label="benchmark")
    path = await proxy.start()
    listeners = []
    for _ in range(2):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        listeners.append(sock)
    http_port = listeners[0].getsockname()[1]
    handoff = await asyncio.to_thread(connect_handoff, path)
    with handoff:
        send_listeners(handoff, listeners)
    async with asyncio.timeout(10):
        await proxy.listening.wait()
    return proxy, http_port, records


async def proxy_costs(requests: int) -> dict[str, Any]:
    """Median, p90 of ``requests`` HTTPS requests each way, and what the proxy added."""
    # Each connection is a debug line of the proxy's: not this report's.
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.INFO))
    with tempfile.TemporaryDirectory(prefix="goondan-bench-tls-") as directory:
        cert, key = await asyncio.to_thread(_certificate, Path(directory))
        server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_tls.load_cert_chain(cert, key)
        client_tls = ssl.create_default_context(cafile=str(cert))
        server = await asyncio.start_server(_serve, "127.0.0.1", 0, ssl=server_tls)
        port = server.sockets[0].getsockname()[1]
        proxy, http_port, records = await _proxy()

        async def direct() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_tls)
            await _request(reader, writer, port)

        async def proxied() -> None:
            reader, writer = await asyncio.open_connection("127.0.0.1", http_port)
            writer.write(f"CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise WrongAnswer(f"the proxy refused: {head[:60]!r}")
            await writer.start_tls(client_tls, server_hostname="127.0.0.1")
            await _request(reader, writer, port)

        samples: dict[str, list[float]] = {"direct": [], "proxied": []}
        try:
            for _ in range(requests):
                for name, go in (("direct", direct), ("proxied", proxied)):
                    started = time.perf_counter()
                    async with asyncio.timeout(30):
                        await go()
                    samples[name].append((time.perf_counter() - started) * 1000)
        finally:
            await proxy.close()
            server.close()
            await server.wait_closed()
        recorded = min(requests, MAX_RECORDED)
        if len(records) != recorded or not all(r.allowed and r.bytes_down for r in records):
            raise WrongAnswer("the proxy did not record every request it carried")

    def p90(values: list[float]) -> float:
        ordered = sorted(values)
        return round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3)

    direct_ms = statistics.median(samples["direct"])
    proxied_ms = statistics.median(samples["proxied"])
    return {
        "requests": requests,
        "direct_ms": round(direct_ms, 3),
        "proxied_ms": round(proxied_ms, 3),
        "added_ms": round(proxied_ms - direct_ms, 3),
        "direct_p90_ms": p90(samples["direct"]),
        "proxied_p90_ms": p90(samples["proxied"]),
    }


def print_proxy(figures: dict[str, Any]) -> None:
    """The figures as lines of the benchmark's report."""
    print()
    print(
        f"HTTPS GET over a fresh connection, {figures['requests']} requests each way, "
        "taking turns: ms per request"
    )
    print(f"{'path':<12} {'median':>8} {'p90':>8} {'added':>8} {'target':>8}")
    print(f"{'direct':<12} {figures['direct_ms']:>8.2f} {figures['direct_p90_ms']:>8.2f}")
    print(
        f"{'via proxy':<12} {figures['proxied_ms']:>8.2f} {figures['proxied_p90_ms']:>8.2f} "
        f"{figures['added_ms']:>+8.2f} {f'≤ {TARGET_ADDED_MS:g}':>8}"
    )
