"""Thin adapters from web frameworks to the verifier; no framework is a package dependency."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import Literal

    HttpParser = Literal["auto", "httptools", "h11"]

# serve-auth's HTTP parsers (uvicorn's names), here so the CLI offers them without uvicorn.
HTTP_PARSERS: tuple[HttpParser, ...] = ("auto", "httptools", "h11")
