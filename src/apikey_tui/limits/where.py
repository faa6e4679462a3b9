"""Which store counts: a Redis-protocol server named by a URL, or else the key database."""

from __future__ import annotations

from sqlalchemy import Engine

from apikey_tui.clock import Clock, system_clock
from apikey_tui.config import mask_url
from apikey_tui.limits.port import CountStore

KEY_DATABASE = "the key database"


def open_store(
    engine: Engine, url: str | None, *, clock: Clock = system_clock
) -> tuple[CountStore, str]:
    """The store of counts and where it is (password masked): Redis/Valkey at url, else the
    key database on engine. No connection is made here."""
    if url is not None:
        from apikey_tui.limits.redis_store import RedisLimitStore

        return RedisLimitStore(url), mask_url(url)
    from apikey_tui.limits.sql_store import SqlLimitStore

    return SqlLimitStore(engine, clock=clock), KEY_DATABASE
