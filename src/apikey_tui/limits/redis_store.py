"""The store of counts on a Redis-protocol server (Valkey, Redis): redis-py and one Lua script."""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from apikey_tui.config import mask_url
from apikey_tui.errors import InvalidInputError, StoreUnavailableError
from apikey_tui.forksafety import park
from apikey_tui.limits.port import Grant

if TYPE_CHECKING:
    import redis

log = logging.getLogger("apikey_tui.limits")

# Every bound is a few hundred milliseconds: a request never waits longer on a store that is
# down or black-holed, and the limiter then leaves it alone for its retry interval.
CONNECT_TIMEOUT_S = 0.5
SOCKET_TIMEOUT_S = 0.5
# A window's hash outlives the window's end by this much: a lease's window is never judged
# after its end, so the margin only absorbs clocks of hosts that read the key late.
EXPIRY_MARGIN_S = 60
PREFIX = "apikey_tui:limit:"
BOOT_KEY = "apikey_tui:limit-boot"

# KEYS[1]: the limit's hash {w: window index, used: tokens granted in it}; KEYS[2]: the boot
# marker {id, created, lost}. ARGV: n, window seconds, want, known boot, a fresh boot id, the
# expiry margin. The store's TIME decides the window, so hosts with skewed clocks agree. One
# hash per limit (not one key per window) keeps every key the script touches declared, as
# Redis asks of scripts (and Dragonfly enforces); a new window overwrites the old one's count.
TAKE = """
local n, w, want = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local known, fresh, margin = ARGV[4], ARGV[5], tonumber(ARGV[6])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local marker = redis.call('HMGET', KEYS[2], 'id', 'created', 'lost')
local id, lost = marker[1], tonumber(marker[3])
if not id then
  id = fresh
  redis.call('HSET', KEYS[2], 'id', id, 'created', string.format('%.6f', now))
  if known ~= '' then
    lost = now
    redis.call('HSET', KEYS[2], 'lost', string.format('%.6f', now))
  end
elseif known ~= '' and known ~= id and not lost then
  lost = tonumber(marker[2])
  redis.call('HSET', KEYS[2], 'lost', marker[2])
end
local window = math.floor(tonumber(t[1]) / w)
local ends = (window + 1) * w
local granted = 0
if not (lost and window * w <= lost) then
  local count = redis.call('HMGET', KEYS[1], 'w', 'used')
  local used = 0
  if tonumber(count[1]) == window then used = tonumber(count[2]) end
  granted = math.max(0, math.min(want, n - used))
  redis.call('HSET', KEYS[1], 'w', string.format('%d', window), 'used', used + granted)
  redis.call('EXPIREAT', KEYS[1], ends + margin)
end
return {granted, ends, t[1], t[2], id}
"""


class RedisLimitStore:
    """Counts on a Redis-protocol server shared by every host (`APIKEY_TUI_LIMITS_URL`)."""

    def __init__(self, url: str) -> None:
        try:
            import redis  # noqa: F401
        except ImportError:  # the [limits] extra is not installed
            raise InvalidInputError(
                "a redis:// limits store needs redis-py: install apikey-tui[limits]"
            ) from None
        self._url = url
        self._where = mask_url(url)
        self._client = self._connect(url)
        self._script = self._client.register_script(TAKE)
        self._policy_read = False  # the eviction policy, read once the store first answers

    @staticmethod
    def _connect(url: str) -> redis.Redis:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        try:
            client: redis.Redis = redis.Redis.from_url(
                url,
                socket_connect_timeout=CONNECT_TIMEOUT_S,
                socket_timeout=SOCKET_TIMEOUT_S,
                # redis-py retries three times with backoff by default: a request would wait
                # seconds on a dead store. The limiter retries after its own interval instead.
                retry=Retry(NoBackoff(), 0),
            )
        except ValueError as exc:
            raise InvalidInputError(f"limits store URL is not usable: {exc}") from None
        # A URL's ?socket_timeout= overrides the arguments above (redis-py's from_url): it may
        # shorten a bound, never lift it, or a sync request would wait that long on a frozen
        # store (none is made yet: connections read these when they are made).
        options = client.connection_pool.connection_kwargs
        for name, bound in (
            ("socket_connect_timeout", CONNECT_TIMEOUT_S),
            ("socket_timeout", SOCKET_TIMEOUT_S),
        ):
            given = options.get(name)
            options[name] = given if given is not None and 0 < given < bound else bound
            if f"orig_{name}" in options:  # what redis-py 8 restores after a maintenance event
                options[f"orig_{name}"] = options[name]
        return client

    def take(
        self, limit_key: str, n: int, window_seconds: int, want: int, known_boot: str
    ) -> Grant:
        """One EVALSHA of TAKE (loaded again by redis-py after a restart emptied the cache)."""
        import redis

        keys = [f"{PREFIX}{{{limit_key}}}", BOOT_KEY]
        args: list[str | int] = [
            n,
            window_seconds,
            want,
            known_boot,
            secrets.token_hex(8),
            EXPIRY_MARGIN_S,
        ]
        try:
            granted, ends, seconds, micros, boot = self._script(keys=keys, args=args)
        except redis.RedisError as exc:
            raise self._unavailable(exc) from None
        if not self._policy_read:
            self._policy_read = True
            self._warn_if_evicting()
        store_now = int(seconds) + int(micros) / 1_000_000
        # A URL asking for ?decode_responses=true gets str replies: the id either way.
        return Grant(int(granted), float(ends), store_now, _text(boot))

    def _warn_if_evicting(self) -> None:
        """One warning when the server may evict keys under memory pressure: a count evicted
        mid-window lets the limit admit up to N again in that window (a count carries a TTL,
        so `volatile-*` policies evict it first; the boot marker sees only a restart). A server
        that does not let us read its config (managed services often refuse CONFIG) is not
        judged."""
        import redis

        try:
            config = self._client.config_get("maxmemory*")
        except redis.RedisError:
            return
        values = {_text(k or ""): _text(v or "") for k, v in config.items()}
        policy = values.get("maxmemory-policy", "noeviction")
        if values.get("maxmemory", "0") != "0" and policy != "noeviction":
            log.warning(
                "limits store %s may evict counts under memory pressure (maxmemory-policy %s):"
                " a limit could then admit more than its N; set maxmemory-policy noeviction"
                " or give the limits a server of their own",
                self._where,
                policy,
            )

    def window_use(self, limit_key: str, window_seconds: int) -> tuple[int, float]:
        """The window's count, read with the server's TIME (CountReader.window_use)."""
        import redis

        try:
            with self._client.pipeline(transaction=True) as pipe:
                pipe.time()
                pipe.hmget(f"{PREFIX}{{{limit_key}}}", "w", "used")
                (seconds, _micros), (window, used) = pipe.execute()
        except redis.RedisError as exc:
            raise self._unavailable(exc) from None
        current = int(seconds) // window_seconds
        count = int(used) if window is not None and int(window) == current else 0
        return count, float((current + 1) * window_seconds)

    def counted(self) -> bool:
        """Whether the boot marker is there (CountReader.counted)."""
        import redis

        try:
            return bool(self._client.exists(BOOT_KEY))
        except redis.RedisError as exc:
            raise self._unavailable(exc) from None

    def _unavailable(self, exc: Exception) -> StoreUnavailableError:
        """A Redis error as ours: one line, the URL's password masked."""
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        return StoreUnavailableError(f"limits store unavailable ({self._where}): {reason}")

    def forget_connections(self) -> None:
        """Park the parent's client (its sockets are the parent's) and connect anew."""
        park([self._client])
        self._client = self._connect(self._url)
        self._script = self._client.register_script(TAKE)


def _text(reply: bytes | str) -> str:
    """A Redis bulk reply as text, whether the client decodes replies or not."""
    return reply if isinstance(reply, str) else reply.decode()
