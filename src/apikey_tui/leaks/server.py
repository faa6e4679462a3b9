"""serve-leaks: an ASGI app taking signed leak reports (GitHub, deps.dev) and revocations.

`POST /github` and `POST /depsdev` take the secret-scanning partner format (`reports`): the
signature is checked over the raw body before anything is read from it, each token that is a
genuine key is contained (`KeyStore.contain_leak`), and the answer is GitHub's feedback array.
`POST /revoke` lets anyone holding keys stop them: `{"credentials": [...]}`, always 202 with
one body, the work done after the answer so that neither the body nor the time it takes says
which keys were real. Tokens are never logged: only their SHA-256 and the masked public id.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from apikey_tui import keyformat
from apikey_tui.errors import LeakRequestError, StoreUnavailableError
from apikey_tui.integrations.asgi_messages import HTTPApp, Receive, Scope, Send, respond
from apikey_tui.integrations.clients import asgi_client
from apikey_tui.keyformat import MalformedKey
from apikey_tui.leaks.clients import RateLimit, bucket
from apikey_tui.leaks.reports import (
    DEPSDEV,
    GITHUB,
    MAX_BODY,
    PublicKeys,
    Signer,
    check_signature,
    parse_report,
    parse_revocation,
)
from apikey_tui.leaks.verdicts import judge, mask, token_sha256
from apikey_tui.names import printable
from apikey_tui.networks import TrustedProxies
from apikey_tui.store import Actor, KeyStore, Leak
from apikey_tui.verifier.gate import FailureBudget

logger = logging.getLogger("apikey_tui.leaks")

REALM = "leaks"  # for the error tree's answer; no challenge is sent
REVOKE_ACCEPTED = json.dumps({"message": "accepted; any live key among them is now revoked"})
JSON = [("content-type", "application/json"), ("cache-control", "no-store")]
ON_LEAK_TIMEOUT = 60.0  # seconds an --on-leak command may run
ON_LEAK_AT_ONCE = 4  # --on-leak commands running at once; the others wait their turn
BODIES_IN_FLIGHT = 64 * MAX_BODY  # bytes of request bodies arriving at once, all requests
BODIES_PER_CLIENT = 4  # bodies of MAX_BODY one client address (IPv6: /64) may have arriving
MAX_PENDING_REVOCATIONS = 64  # revocation requests queued behind their answers
REPORT_WORKERS = 4  # signed reports judged at once (argon2, database)
# /revoke and keys made by 0.1.0 (no fingerprint, so any secret costs argon2): one wrong secret
# checked per such key at once, then one a minute, whoever sends them.
LEGACY_BURST, LEGACY_PER_SECOND = 1.0, 1 / 60
_PATHS = {"/github": GITHUB, "/depsdev": DEPSDEV}
_REFUSALS = {  # what is logged (once per id and request) of a real id that changed nothing
    "forged": "serve-leaks: %s named %s with a wrong secret (forged; nothing changed)",
    "unchecked": "serve-leaks: %s named %s, a key made before fingerprints, after too many wrong "
    "secrets for it: not checked, nothing changed (send it again in a minute)",
}


@dataclass(frozen=True)
class Contained:
    """What one token turned out to be; leak is set when the key was ours and genuine."""

    token_hash: str
    leak: Leak | None


class LeaksApp(HTTPApp):
    """The ASGI app behind `apikey-tui serve-leaks` (run by `integrations.auth_server.serve`)."""

    name = "serve-leaks"
    logger = logger

    def __init__(
        self,
        store: KeyStore,
        keys: Mapping[str, PublicKeys],
        *,
        delete: bool = False,
        on_leak: Sequence[str] | None = None,
        revoke_per_minute: int = 30,
        trusted_proxies: TrustedProxies | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.keys = keys  # by signer name; an endpoint whose signer has no keys is 404
        self.delete = delete
        self.on_leak = list(on_leak) if on_leak else None
        self.rate = RateLimit(revoke_per_minute, clock=monotonic)
        self.legacy = FailureBudget(LEGACY_BURST, LEGACY_PER_SECOND, clock=monotonic)
        # The services' one reading of the trusted-proxy rule (`integrations.clients`).
        self._client = asgi_client(trusted_proxies or TrustedProxies())
        self._arriving = 0  # bytes of request bodies being received (`_body`)
        self._arriving_from: dict[str, int] = {}  # and per client (`clients.bucket`)
        self._pending: set[asyncio.Task[None]] = set()  # revocations answered, not yet done
        # --on-leak runs, apart: they neither take a revocation's place nor run unbounded (a
        # report of 1,000 leaks started 1,000 processes at once).
        self._notifying: set[asyncio.Task[None]] = set()
        self._on_leak_turns = asyncio.Semaphore(ON_LEAK_AT_ONCE)
        # Separate threads: a signed report never waits behind revocations, which take one
        # thread (one core's worth of argon2 at most) and queue for it.
        self._reports = ThreadPoolExecutor(REPORT_WORKERS, "serve-leaks-report")
        self._revocations = ThreadPoolExecutor(1, "serve-leaks-revoke")

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self._route(scope, receive, send)
        except LeakRequestError as error:
            await respond(scope, send, *error.response(REALM))

    async def _route(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        signer = _PATHS.get(path)
        if path != "/revoke" and (signer is None or signer.name not in self.keys):
            raise LeakRequestError(404, "serve-leaks answers POST /github, /depsdev and /revoke")
        if scope["method"] != "POST":
            raise LeakRequestError(405, "only POST", headers=(("allow", "POST"),))
        # Logged and kept in the trail, and the rate limit's bucket. A client the rule cannot
        # place (a trusted proxy that sent no readable hop) counts as its peer: all of that
        # proxy's unplaceable clients share one limit, which is stricter, never looser.
        address = printable(self._client(scope) or _peer(scope))
        if signer is None:
            await self._revoke(scope, receive, send, address)
            return
        body = await self._body(scope, receive, address)
        headers = _headers(scope, signer)
        check_signature(self.keys[signer.name], *headers, body)  # before reading anything
        reported = parse_report(body)
        try:
            contained = await asyncio.get_running_loop().run_in_executor(
                self._reports,
                self._contain_all,
                [(r.token, r.url or f"a {signer.name} report") for r in reported],
                signer.name,
                address,
            )
        except StoreUnavailableError as exc:
            # Its text is the driver's first line, not the statement (`db.driver_errors`), and
            # no token reaches the database, only public ids: the operator must learn why (a
            # role with a verifier's grants cannot stop a key).
            logger.error("serve-leaks: a %s report was not acted on: %s", signer.name, exc)
            raise LeakRequestError(503, "the key database is unavailable; send it again") from None
        feedback = [
            {
                "token_hash": c.token_hash,
                "token_type": r.type,
                "label": "true_positive" if c.leak is not None else "false_positive",
            }
            for r, c in zip(reported, contained, strict=True)
        ]
        logger.warning(
            "serve-leaks: %s report from %s: %d token(s), %d ours",
            signer.name, address, len(reported), sum(c.leak is not None for c in contained),
        )  # fmt: skip
        await respond(scope, send, 200, JSON, json.dumps(feedback).encode())
        self._notify([c.leak for c in contained if c.leak is not None], contained)

    async def _body(self, scope: Scope, receive: Receive, address: str) -> bytes:
        """The request body, refused (413) as soon as it passes MAX_BODY, or (503) as soon as
        the bodies arriving at once would hold over BODIES_IN_FLIGHT bytes, or those of this
        client (`clients.bucket`) over BODIES_PER_CLIENT bodies' worth: anyone may open many
        connections that each send nearly MAX_BODY and stall until the header timeout (1,500
        of them held 1.6 GB), and a signature can only be checked over a whole body."""
        client = bucket(address)
        for name, value in scope["headers"]:
            if name.lower() == b"content-length":
                if not value.isdigit():
                    raise LeakRequestError(400, "content-length is not a number")
                if int(value) > MAX_BODY:
                    raise LeakRequestError(413, f"the body is over {MAX_BODY} bytes")
        chunks: list[bytes] = []
        size = 0
        try:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    raise LeakRequestError(400, "the request ended before its body")
                chunk: bytes = message.get("body", b"")
                if size + len(chunk) > MAX_BODY:
                    raise LeakRequestError(413, f"the body is over {MAX_BODY} bytes")
                mine = self._arriving_from.get(client, 0) + len(chunk)
                if (
                    self._arriving + len(chunk) > BODIES_IN_FLIGHT
                    or mine > BODIES_PER_CLIENT * MAX_BODY
                ):
                    raise LeakRequestError(
                        503,
                        "too many requests arriving at once; send it again",
                        headers=(("retry-after", "5"),),
                    )
                size += len(chunk)
                self._arriving += len(chunk)
                self._arriving_from[client] = mine
                chunks.append(chunk)
                if not message.get("more_body", False):
                    return b"".join(chunks)
        finally:
            self._arriving -= size
            left = self._arriving_from.pop(client, 0) - size
            if left:  # only clients with bodies arriving are kept
                self._arriving_from[client] = left

    async def _revoke(self, scope: Scope, receive: Receive, send: Send, address: str) -> None:
        if not self.rate.allow(address):
            raise LeakRequestError(
                429,
                "too many revocation requests from this address",
                headers=(("retry-after", "60"),),
            )
        credentials = parse_revocation(await self._body(scope, receive, address))
        if len(self._pending) >= MAX_PENDING_REVOCATIONS:
            raise LeakRequestError(
                503,
                "too many revocations in progress; send it again",
                headers=(("retry-after", "5"),),
            )
        # Answered first, the same for every list: the time to answer says nothing either.
        await respond(scope, send, 202, JSON, REVOKE_ACCEPTED.encode())
        pairs = [(c, f"POST /revoke from {address}") for c in credentials]
        self._later(self._revoke_later(pairs, address), self._pending)

    async def _revoke_later(self, pairs: list[tuple[str, str]], address: str) -> None:
        try:
            contained = await asyncio.get_running_loop().run_in_executor(
                self._revocations, self._contain_all, pairs, "revoke", address
            )
        except StoreUnavailableError as exc:
            logger.error("serve-leaks: a revocation was lost: %s", exc)
            return
        except Exception as exc:
            # Named by its type alone: an exception's repr may hold a token (a UnicodeError
            # holds the whole string), and asyncio would log it as "never retrieved".
            logger.error("serve-leaks: a revocation failed (%s)", type(exc).__name__)
            return
        self._notify([c.leak for c in contained if c.leak is not None], contained)

    def _contain_all(
        self, tokens: list[tuple[str, str]], source: str, address: str
    ) -> list[Contained]:
        """Judge each token once (a thread: argon2 and the database) and contain the genuine."""
        store = KeyStore(
            self.store.engine,
            hasher=self.store.hasher,
            actor=Actor(source, address[:64]),
            clock=self.store.clock,
        )
        done: dict[str, Contained] = {}
        said: set[tuple[str, str]] = set()  # (state, public id) logged: once each per request
        results = []
        try:
            for token, where in tokens:
                digest = token_sha256(token)
                if digest not in done:
                    leak = self._contain(store, token, source, where, said)
                    done[digest] = Contained(digest, leak)
                results.append(done[digest])
        finally:
            store.release()  # its read connection, else kept until the store is collected
        return results

    def _contain(
        self, store: KeyStore, token: str, source: str, where: str, said: set[tuple[str, str]]
    ) -> Leak | None:
        try:
            # A key holds no whitespace: one sent with some around it (a line read with its
            # newline, as `jq -Rs` reads a key file) is that key, never "not ours" under a 202.
            key = keyformat.parse(token.strip())
        except MalformedKey:
            return None
        # A signed report is judged whole; /revoke, open to anyone, within the legacy budget.
        # Deleted or unknown changes nothing here: not told apart (each a scan of the trail).
        legacy = self.legacy if source == "revoke" else None
        verdict = judge(store, key, legacy, tell_deleted=False)
        if verdict.credential is None:
            if verdict.state in _REFUSALS and (verdict.state, key.public_id) not in said:
                said.add((verdict.state, key.public_id))
                logger.warning(_REFUSALS[verdict.state], source, mask(key.public_id))
            return None
        leak = store.contain_leak(
            verdict.credential, source=source, where=where, delete=self.delete
        )
        if leak is not None:
            logger.warning(
                "serve-leaks: %s: key %s/%s (%s) %s; token sha256 %s; %s",
                source, leak.owner, leak.name, mask(key.public_id), leak.outcome,
                token_sha256(token), printable(where),
            )  # fmt: skip
        return leak

    def _notify(self, leaks: list[Leak], contained: list[Contained]) -> None:
        """Run --on-leak once per leak, with its description (never the key) on stdin; a report
        seen before (outcome repeated) runs nothing: it acts once."""
        if self.on_leak is None:
            return
        hashes = {c.leak: c.token_hash for c in contained if c.leak is not None}
        for leak in dict.fromkeys(leaks):
            if leak.outcome == "repeated":
                continue
            description = {
                **leak.to_json(),
                "public_id": mask(leak.public_id or ""),
                "token_sha256": hashes[leak],
            }
            self._later(
                self._run_on_leak(json.dumps(description).encode() + b"\n"), self._notifying
            )

    async def _run_on_leak(self, description: bytes) -> None:
        async with self._on_leak_turns:
            await self._on_leak_run(description)

    async def _on_leak_run(self, description: bytes) -> None:
        assert self.on_leak is not None
        try:
            process = await asyncio.create_subprocess_exec(
                *self.on_leak,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            logger.error("serve-leaks: --on-leak could not start: %s", exc.strerror)
            return
        try:
            await asyncio.wait_for(process.communicate(description), ON_LEAK_TIMEOUT)
        except TimeoutError:
            process.kill()
            await process.wait()
            logger.error("serve-leaks: --on-leak ran over %.0f s and was killed", ON_LEAK_TIMEOUT)
            return
        if process.returncode != 0:
            logger.error("serve-leaks: --on-leak exited with %s", process.returncode)

    def _later(self, work: Coroutine[Any, Any, None], tasks: set[asyncio.Task[None]]) -> None:
        task = asyncio.ensure_future(work)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def shutdown(self) -> None:
        if self._pending or self._notifying:  # revocations answered 202 finish, not dropped
            await asyncio.wait(self._pending | self._notifying, timeout=ON_LEAK_TIMEOUT)
        self._reports.shutdown(wait=False)
        self._revocations.shutdown(wait=False)
        self.store.close()


def _headers(scope: Scope, signer: Signer) -> tuple[bytes | None, bytes | None]:
    """The signer's key identifier and signature headers; one of each, or refused."""
    found: dict[bytes, list[bytes]] = {signer.identifier_header: [], signer.signature_header: []}
    for name, value in scope["headers"]:
        values = found.get(name.lower())
        if values is not None:
            values.append(value)
    if any(len(values) > 1 for values in found.values()):
        raise LeakRequestError(401, "a signature header is given twice")
    identifier, signature = found[signer.identifier_header], found[signer.signature_header]
    return (identifier[0] if identifier else None, signature[0] if signature else None)


def _peer(scope: Scope) -> str:
    client = scope.get("client")
    return str(client[0]) if client else "unknown"
