"""The options every serve-* command shares: where it listens, its timeouts, its HTTP parser."""

from __future__ import annotations

import argparse

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli.py
if TYPE_CHECKING:
    from typing import Any

# The standard library only: the CLI builds every parser for `--help` and usage errors.
PARSERS = ("auto", "httptools", "h11")  # auth_server.PARSERS, without importing uvicorn


def count(text: str) -> int:
    """A whole number from 1 (argparse type)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1, got {text[:30]!a}")
    return value


def add_server_options(parser: argparse.ArgumentParser, *, port: int) -> None:
    """--host and --port, and the connection group: keep-alive and header timeouts, --http."""
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=port, help=f"listen port (default {port})")
    connections = parser.add_argument_group("connections")
    connections.add_argument(
        "--keep-alive-timeout",
        type=count,
        default=5,
        metavar="SECONDS",
        help="close a connection idle this long, a new one included (default 5; keep it longer "
        "than the proxy's idle timeout for its upstream connections)",
    )
    connections.add_argument(
        "--header-timeout",
        type=count,
        default=10,
        metavar="SECONDS",
        help="close a connection whose request has not arrived whole this long after its first "
        "byte (default 10)",
    )
    connections.add_argument(
        "--http",
        choices=PARSERS,
        default="auto",
        help="the HTTP parser (default auto: httptools when installed, as [serve] does, else h11)",
    )


def server_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of add_server_options, as auth_server.serve takes them."""
    return {
        "host": args.host,
        "port": args.port,
        "keep_alive_timeout": args.keep_alive_timeout,
        "header_timeout": args.header_timeout,
        "http": args.http,
    }
