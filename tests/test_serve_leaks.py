"""serve-leaks: signed reports (GitHub, deps.dev) and /revoke, in-process and as a real process."""

from __future__ import annotations

import asyncio
import base64
import gc
import hashlib
import itertools
import json
import logging
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from sqlalchemy import text as sql
from starlette.testclient import TestClient

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.errors import DatabasePermissionError
from apikey_tui.hashing import SecretHasher, fingerprint
from apikey_tui.leaks.clients import RateLimit
from apikey_tui.leaks.reports import MAX_BODY, load_public_keys
from apikey_tui.leaks.server import (
    BODIES_IN_FLIGHT,
    BODIES_PER_CLIENT,
    ON_LEAK_AT_ONCE,
    REVOKE_ACCEPTED,
    LeaksApp,
)
from apikey_tui.networks import TrustedProxies
from apikey_tui.store import LEAK_EVENT, KeyStore
from tests.conftest import ACTOR, CHEAP, every_fingerprint
from tests.test_proxies import Process
from tests.test_verifier import CountingHasher
from tests.throwaway_postgres import free_port

GITHUB_HEADERS = ("Github-Public-Key-Identifier", "Github-Public-Key-Signature")
DEPSDEV_HEADERS = ("GOSST-PUBLIC-KEY-IDENTIFIER", "GOSST-PUBLIC-KEY-SIGNATURE")


class Signer:
    """A P-256 key made for the test, published in a keys file like GitHub's."""

    def __init__(self, identifier: str) -> None:
        self.identifier = identifier
        self.private = ec.generate_private_key(ec.SECP256R1())

    def document(self) -> dict[str, Any]:
        pem = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        key = {"key_identifier": self.identifier, "key": pem.decode(), "is_current": True}
        return {"public_keys": [key]}

    def sign(self, body: bytes) -> str:
        return base64.b64encode(self.private.sign(body, ec.ECDSA(hashes.SHA256()))).decode()

    def headers(self, body: bytes, names: tuple[str, str] = GITHUB_HEADERS) -> dict[str, str]:
        return {names[0]: self.identifier, names[1]: self.sign(body)}


def report(*tokens: str, url: str = "https://github.com/o/r/blob/abc/app.py") -> bytes:
    entries = [{"token": t, "type": "apikey_tui", "url": url, "source": "content"} for t in tokens]
    return json.dumps(entries).encode()


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@pytest.fixture
def signer() -> Signer:
    """GitHub's signing key, as the test plays GitHub."""
    return Signer("github-key-1")


@pytest.fixture
def store(database_url: str) -> Iterator[KeyStore]:
    """An admin's store on the database the app serves."""
    key_store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    yield key_store
    key_store.close()


def make_client(store: KeyStore, signer: Signer, **options: Any) -> TestClient:
    """The app on the store's database, trusting signer for GitHub (and deps.dev if asked)."""
    public = {signer.identifier: signer.private.public_key()}
    keys = {"github": public}
    if options.pop("depsdev", False):
        keys["depsdev"] = public
    address = options.pop("client", ("192.0.2.10", 40000))
    app_store = KeyStore(store.engine, hasher=CHEAP, clock=store.clock)
    return TestClient(LeaksApp(app_store, keys, **options), client=address)


def write_keys(folder: Path, signer: Signer) -> Path:
    path = folder / "github-keys.json"
    path.write_text(json.dumps(signer.document()))
    return path


@pytest.fixture
def client(store: KeyStore, signer: Signer) -> Iterator[TestClient]:
    """The app on the store's database, trusting the test's GitHub key."""
    with make_client(store, signer) as test_client:
        yield test_client


def test_signed_report_disables_a_live_key_and_answers_feedback(
    client: TestClient, store: KeyStore, signer: Signer
) -> None:
    """A signed report disables our live key (reason and URL in the trail) and labels each
    token: ours true_positive, anything else false_positive, by SHA-256."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    other = keyformat.generate()[1]
    body = report(key, other, "not-a-key")
    answer = client.post("/github", content=body, headers=signer.headers(body))
    assert answer.status_code == 200
    assert answer.json() == [
        {"token_hash": sha(key), "token_type": "apikey_tui", "label": "true_positive"},
        {"token_hash": sha(other), "token_type": "apikey_tui", "label": "false_positive"},
        {"token_hash": sha("not-a-key"), "token_type": "apikey_tui", "label": "false_positive"},
    ]
    info = store.get_key("alice", "ci")
    assert info.leaked and info.disabled_reason == "leaked: https://github.com/o/r/blob/abc/app.py"
    [leak] = store.leaks("alice", "ci")
    assert (leak.source, leak.outcome) == ("github", "disabled")
    [event] = store.events(limit=1)
    assert event.action == LEAK_EVENT and event.actor == "github"


def test_forged_key_is_a_false_positive_and_changes_nothing(
    client: TestClient, store: KeyStore, signer: Signer
) -> None:
    """A report naming a real public id with a wrong secret is false_positive; nothing changes."""
    info = store.create_key("alice", "ci", ["project"]).info
    forged = keyformat.generate(info.public_id)[1]
    events = store.events()
    body = report(forged)
    answer = client.post("/github", content=body, headers=signer.headers(body))
    assert answer.json()[0]["label"] == "false_positive"
    assert not store.get_key("alice", "ci").disabled and store.events() == events


def bad_signatures(signer: Signer, body: bytes) -> list[dict[str, str]]:
    stranger = Signer(signer.identifier)  # same identifier, another key
    good = signer.headers(body)
    return [
        {},
        {GITHUB_HEADERS[0]: signer.identifier},
        {GITHUB_HEADERS[1]: good[GITHUB_HEADERS[1]]},
        {**good, GITHUB_HEADERS[0]: "unknown-key"},
        {**good, GITHUB_HEADERS[1]: signer.sign(body + b" ")},
        {**good, GITHUB_HEADERS[1]: "not base64!"},
        {**good, GITHUB_HEADERS[1]: base64.b64encode(b"\x30\x03junk").decode()},
        stranger.headers(body),
        signer.headers(body, DEPSDEV_HEADERS),  # deps.dev's headers on GitHub's endpoint
    ]


def test_bad_missing_or_unknown_signature_is_401_and_changes_nothing(
    client: TestClient, store: KeyStore, signer: Signer
) -> None:
    """Every bad, missing or unknown signature gets 401 problem+json, and nothing changes."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    events = store.events()
    body = report(key)
    for headers in bad_signatures(signer, body):
        answer = client.post("/github", content=body, headers=headers)
        assert answer.status_code == 401, headers
        assert answer.headers["content-type"] == "application/problem+json"
        assert "www-authenticate" not in answer.headers
    assert not store.get_key("alice", "ci").disabled and store.events() == events


def test_depsdev_endpoint_takes_its_own_headers(
    store: KeyStore, signer: Signer, database_url: str
) -> None:
    """POST /depsdev checks GOSST-PUBLIC-KEY-* headers; without its keys it is 404."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    body = report(key, url="https://deps.dev/x")
    with make_client(store, signer) as plain:
        assert plain.post("/depsdev", content=body).status_code == 404
    with make_client(store, signer, depsdev=True) as client:
        wrong = client.post("/depsdev", content=body, headers=signer.headers(body))
        assert wrong.status_code == 401
        right = client.post("/depsdev", content=body, headers=signer.headers(body, DEPSDEV_HEADERS))
        assert right.json()[0]["label"] == "true_positive"
    assert [leak.source for leak in store.leaks("alice", "ci")] == ["depsdev"]


def test_oversized_or_malformed_reports_are_refused(
    client: TestClient, store: KeyStore, signer: Signer
) -> None:
    """Over 1 MiB is 413; over 1000 tokens, not an array, a non-string token, repeated names or
    NaN are 400 even when signed; nothing changes."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    huge = b"[" + b" " * (1024 * 1024) + b"]"
    assert client.post("/github", content=huge, headers=signer.headers(huge)).status_code == 413
    bodies = [
        report(*([key] * 1001)),
        b'{"token": "x"}',
        json.dumps([{"token": 5}]).encode(),
        b'[{"token": "a", "token": "' + key.encode() + b'"}]',
        b'[{"token": "a", "type": NaN}]',
        b"\xff[]",
    ]
    for body in bodies:
        assert client.post("/github", content=body, headers=signer.headers(body)).status_code == 400
    assert not store.get_key("alice", "ci").disabled


def test_only_post_on_known_paths(client: TestClient) -> None:
    """GET is 405 with Allow: POST; an unknown path is 404; both problem+json."""
    answer = client.get("/github")
    assert answer.status_code == 405 and answer.headers["allow"] == "POST"
    assert client.post("/other", content=b"[]").status_code == 404


def test_delete_action_deletes_the_key(store: KeyStore, signer: Signer) -> None:
    """With --action delete a reported live key is deleted; its leak stays in the trail."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    body = report(key)
    with make_client(store, signer, delete=True) as client:
        assert client.post("/github", content=body, headers=signer.headers(body)).status_code == 200
    assert store.list_keys("alice") == []
    assert [leak.outcome for leak in store.leaks("alice", "ci")] == ["deleted"]


def wait_for(condition: Any) -> None:
    deadline = time.monotonic() + 20
    while not condition():
        assert time.monotonic() < deadline, "the condition never held"
        time.sleep(0.02)


def test_revoke_always_answers_202_with_one_body(
    client: TestClient, store: KeyStore, signer: Signer
) -> None:
    """/revoke answers a live key, a forged one and junk alike (202, same body), and the live
    key is then disabled with the client's address in the trail."""
    info = store.create_key("alice", "ci", ["project"])
    forged = keyformat.generate(info.info.public_id)[1]
    answers = [
        client.post("/revoke", json={"credentials": credentials})
        for credentials in ([forged], ["junk"], [], [info.plaintext])
    ]
    assert {(a.status_code, a.content) for a in answers} == {(202, REVOKE_ACCEPTED.encode())}
    wait_for(lambda: store.get_key("alice", "ci").disabled)
    [leak] = store.leaks("alice", "ci")
    assert (leak.source, leak.where) == ("revoke", "POST /revoke from 192.0.2.10")
    assert client.post("/revoke", content=b"[]").status_code == 400
    over = {"credentials": ["x"] * 1001}
    assert client.post("/revoke", json=over).status_code == 400


def test_revoke_is_rate_limited_per_client_address(store: KeyStore, signer: Signer) -> None:
    """Past the limit an address gets 429 with Retry-After; another address is unaffected."""
    with make_client(store, signer, revoke_per_minute=2) as client:
        codes = [client.post("/revoke", json={"credentials": []}).status_code for _ in range(3)]
        assert codes == [202, 202, 429]
        limited = client.post("/revoke", json={"credentials": []})
        assert limited.headers["retry-after"] == "60"
    with make_client(store, signer, revoke_per_minute=2, client=("192.0.2.11", 1)) as other:
        assert other.post("/revoke", json={"credentials": []}).status_code == 202


def test_forwarded_for_counts_only_behind_a_trusted_proxy(store: KeyStore, signer: Signer) -> None:
    """Behind a trusted proxy each forwarded client has its own limit; from anyone else
    X-Forwarded-For is ignored (a client cannot dodge its limit by writing one)."""
    trusted = TrustedProxies(["127.0.0.1"])
    proxied = make_client(
        store, signer, revoke_per_minute=1, trusted_proxies=trusted, client=("127.0.0.1", 1)
    )
    with proxied as client:
        for n in range(3):
            answer = client.post(
                "/revoke", json={"credentials": []}, headers={"x-forwarded-for": f"198.51.100.{n}"}
            )
            assert answer.status_code == 202
    with make_client(store, signer, revoke_per_minute=1, trusted_proxies=trusted) as direct:
        codes = [
            direct.post(
                "/revoke", json={"credentials": []}, headers={"x-forwarded-for": f"203.0.113.{n}"}
            ).status_code
            for n in range(2)
        ]
        assert codes == [202, 429]


def test_a_trusted_proxy_without_a_readable_hop_counts_as_one_client(
    store: KeyStore, signer: Signer
) -> None:
    """Behind a trusted proxy, requests whose forwarding hop cannot be read (none, garbled)
    share the proxy's own limit: unplaceable clients never get a bucket each."""
    trusted = TrustedProxies(["127.0.0.1"])
    proxied = make_client(
        store, signer, revoke_per_minute=1, trusted_proxies=trusted, client=("127.0.0.1", 1)
    )
    with proxied as client:
        codes = [
            client.post("/revoke", json={"credentials": []}, headers=headers).status_code
            for headers in (
                {},
                {"x-forwarded-for": "198.51.100.7, garbage"},
                {"x-forwarded-for": "nope"},
            )
        ]
    assert codes == [202, 429, 429]


def test_rate_limit_counts_ipv6_per_64_and_refills() -> None:
    """Two addresses of one IPv6 /64 share a bucket; a minute later it is full again."""
    now = [0.0]
    limit = RateLimit(1, clock=lambda: now[0])
    assert limit.allow("2001:db8::1") and not limit.allow("2001:db8::2")
    assert limit.allow("2001:db8:0:1::1")
    now[0] = 60.0
    assert limit.allow("2001:db8::2")


def test_on_leak_runs_with_a_description_without_the_key(
    tmp_path: Path, store: KeyStore, signer: Signer, caplog: pytest.LogCaptureFixture
) -> None:
    """--on-leak gets each leak as JSON on stdin (owner, name, where, SHA-256), never the key;
    the logs name the token by SHA-256 only."""
    created = store.create_key("alice", "ci", ["project"])
    out = tmp_path / "leak.json"
    command = [sys.executable, "-c", f"import sys; open({str(out)!r}, 'w').write(sys.stdin.read())"]
    body = report(created.plaintext)
    caplog.set_level(logging.INFO, "apikey_tui")
    with make_client(store, signer, on_leak=command) as client:
        client.post("/github", content=body, headers=signer.headers(body))
        wait_for(out.exists)
        wait_for(lambda: out.read_text().endswith("\n"))
    description = json.loads(out.read_text())
    assert description["owner"] == "alice" and description["name"] == "ci"
    assert description["token_sha256"] == sha(created.plaintext)
    assert description["source"] == "github" and description["outcome"] == "disabled"
    secret = keyformat.parse(created.plaintext).secret
    assert secret not in out.read_text() and created.info.public_id not in out.read_text()
    assert sha(created.plaintext) in caplog.text and secret not in caplog.text


ON_LEAK_WAITING = """
cat > /dev/null
touch "$1/started-$$"
echo $(( $(ls "$1" | grep -c '^started-') - $(ls "$1" | grep -c '^done-') )) > "$1/seen-$$"
while [ ! -e "$1/go" ]; do sleep 0.01; done
touch "$1/done-$$"
"""


def test_on_leak_runs_a_few_at_once_and_never_blocks_revoke(
    tmp_path: Path, store: KeyStore, signer: Signer
) -> None:
    """A report of 70 leaked keys runs --on-leak at most ON_LEAK_AT_ONCE at a time (it ran 70
    processes at once), and /revoke is answered 202 meanwhile (70 runs took its 64 places)."""
    keys = [store.create_key("alice", f"k{n}", ["project"]).plaintext for n in range(70)]
    command = ["sh", "-c", ON_LEAK_WAITING, "on-leak", str(tmp_path)]
    body = report(*keys)
    with make_client(store, signer, on_leak=command, revoke_per_minute=1000) as client:
        try:
            assert client.post("/github", content=body, headers=signer.headers(body)).is_success
            wait_for(lambda: len(list(tmp_path.glob("seen-*"))) >= ON_LEAK_AT_ONCE)
            time.sleep(0.5)  # more would have started by now, were nothing bounding them
            assert client.post("/revoke", json={"credentials": []}).status_code == 202
        finally:
            (tmp_path / "go").touch()
        wait_for(lambda: len(list(tmp_path.glob("done-*"))) == 70)
    seen = [int(path.read_text()) for path in tmp_path.glob("seen-*")]
    assert max(seen) <= ON_LEAK_AT_ONCE


def test_a_replayed_report_acts_once(tmp_path: Path, store: KeyStore, signer: Signer) -> None:
    """The same signed report sent twice records one leak event and runs --on-leak once; the
    replay is still answered true_positive (the key is ours)."""
    created = store.create_key("alice", "ci", ["project"])
    runs = tmp_path / "runs"
    command = [sys.executable, "-c", f"open({str(runs)!r}, 'a').write('run\\n')"]
    body = report(created.plaintext)
    with make_client(store, signer, on_leak=command) as client:
        for _ in range(2):
            answer = client.post("/github", content=body, headers=signer.headers(body))
            assert answer.json()[0]["label"] == "true_positive"
        wait_for(runs.exists)
        time.sleep(0.5)  # a second run, were there one, would have started by now
    assert runs.read_text() == "run\n"
    assert [x.outcome for x in store.leaks("alice", "ci")] == ["disabled"]


def test_key_files_must_hold_p256_keys(tmp_path: Path) -> None:
    """A keys file that is not JSON, has no keys or holds a P-384 key is refused at start."""
    path = tmp_path / "keys.json"
    other = ec.generate_private_key(ec.SECP384R1()).public_key()
    pem = other.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    ).decode()
    for text in ("nope", '{"public_keys": []}', json.dumps({"public_keys": [{"key": pem}]})):
        path.write_text(text)
        with pytest.raises(ValueError, match=str(path)):
            load_public_keys(path)
    path.write_text(json.dumps({"public_keys": [{"key_identifier": "k", "key": pem}]}))
    with pytest.raises(ValueError, match="P-256"):
        load_public_keys(path)


def test_serve_leaks_refuses_a_bad_key_file(
    tmp_path: Path, sqlite_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """serve-leaks with an unusable keys file exits 2 with one line, before serving."""
    (tmp_path / "k.json").write_text("{}")
    code = main(
        ["serve-leaks", "--database-url", sqlite_url, "--github-keys", str(tmp_path / "k.json")]
    )
    assert code == 2 and "k.json" in capsys.readouterr().err


# --- a real serve-leaks process and a separate verifier process ---------------------------------

VERIFIER = """
import sys, time
from apikey_tui.errors import InvalidKeyError
from apikey_tui.verifier import Verifier
verifier = Verifier.from_url(sys.argv[1])
for line in sys.stdin:
    header = "ApiKey " + line.strip()
    verifier.verify(header)
    print("accepted", flush=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            verifier.verify(header)
        except InvalidKeyError:
            print("refused", flush=True)
            break
        time.sleep(0.005)
    else:
        print("never refused", flush=True)
"""


def post(port: int, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


@pytest.mark.slow
def test_a_separate_verifier_refuses_a_key_after_a_report_or_a_revoke(
    tmp_path: Path, postgres_url: str, signer: Signer
) -> None:
    """With serve-leaks and a verifier in their own processes on PostgreSQL, a signed report
    and a /revoke each make the verifier refuse a key it had accepted; a bad signature does
    not."""
    store = KeyStore.open(postgres_url, actor=ACTOR)
    keys = [store.create_key("alice", f"k{n}", ["project"]).plaintext for n in range(3)]
    port = free_port()
    command = [
        sys.executable, "-m", "apikey_tui", "serve-leaks", "--database-url", postgres_url,
        "--port", str(port), "--github-keys", str(write_keys(tmp_path, signer)),
    ]  # fmt: skip
    server = Process("serve-leaks", command, port, tmp_path)
    verifier = subprocess.Popen(
        [sys.executable, "-c", VERIFIER, postgres_url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert verifier.stdin is not None and verifier.stdout is not None

    def accepted(key: str) -> None:
        assert verifier.stdin is not None and verifier.stdout is not None
        verifier.stdin.write(key + "\n")
        verifier.stdin.flush()
        assert verifier.stdout.readline().strip() == "accepted"

    try:
        body = report(keys[0])
        forged = {**signer.headers(body), GITHUB_HEADERS[1]: signer.sign(body + b"x")}
        status, _ = post(port, "/github", body, forged)
        assert status == 401 and not store.get_key("alice", "k0").disabled
        accepted(keys[0])
        status, answer = post(
            port, "/github", body, {**signer.headers(body), "content-type": "application/json"}
        )
        assert status == 200 and json.loads(answer)[0]["label"] == "true_positive"
        assert verifier.stdout.readline().strip() == "refused"
        accepted(keys[1])
        revoke = json.dumps({"credentials": [keys[1]]}).encode()
        status, answer = post(port, "/revoke", revoke, {"content-type": "application/json"})
        assert (status, answer) == (202, REVOKE_ACCEPTED.encode())
        assert verifier.stdout.readline().strip() == "refused"
        assert not store.get_key("alice", "k2").disabled
        log = server.output()
        for key in keys:
            assert keyformat.parse(key).secret not in log
        assert sha(keys[0]) in log
    finally:
        verifier.kill()
        verifier.wait()
        verifier.stdin.close()
        verifier.stdout.close()
        server.stop()
        store.close()


# --- what no token may do: break a report, stop a revocation, or reach a log ---------------------


def logged(caplog: pytest.LogCaptureFixture) -> str:
    """Every message logged, formatted, after collecting garbage (asyncio logs lost tasks then)."""
    gc.collect()
    return "\n".join(record.getMessage() for record in caplog.records)


def test_a_lone_surrogate_in_a_signed_report_is_a_false_positive(
    client: TestClient, store: KeyStore, signer: Signer
) -> None:
    """A token holding a lone surrogate is answered false_positive (hashed like any token),
    and a genuine key in the same report is still disabled."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    body = report("\ud800", key + "\ud800", key)
    answer = client.post("/github", content=body, headers=signer.headers(body))
    assert answer.status_code == 200
    lone = hashlib.sha256("\ud800".encode("utf-8", "surrogatepass")).hexdigest()
    assert [entry["label"] for entry in answer.json()] == [
        "false_positive",
        "false_positive",
        "true_positive",
    ]
    assert answer.json()[0]["token_hash"] == lone
    assert store.get_key("alice", "ci").disabled


def test_revoke_goes_past_a_lone_surrogate_and_never_logs_a_token(
    client: TestClient, store: KeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    """/revoke of [a key with a lone surrogate glued on, a lone surrogate, a key] revokes the
    last key, and no log line holds the first key or its secret."""
    first = store.create_key("alice", "one", ["project"]).plaintext
    second = store.create_key("alice", "two", ["project"]).plaintext
    caplog.set_level(logging.DEBUG)
    body = json.dumps({"credentials": [first + "\ud800", "\ud800", second]}).encode()
    answer = client.post("/revoke", content=body)
    assert answer.status_code == 202
    wait_for(lambda: store.get_key("alice", "two").disabled)
    client.post("/revoke", json={"credentials": []})  # a later request: the first one's end
    text = logged(caplog)
    assert keyformat.parse(first).secret not in text and first not in text
    assert not store.get_key("alice", "one").disabled


def test_revoke_takes_a_key_sent_with_whitespace_around_it(
    client: TestClient, store: KeyStore
) -> None:
    """A key sent to /revoke with its line's newline (`jq -Rs` of a key file) or spaces around
    it is revoked: it was silently not, under the same 202 saying it was."""
    keys = {name: store.create_key("alice", name, ["project"]).plaintext for name in "ab"}
    body = json.dumps({"credentials": [keys["a"] + "\n", f"  {keys['b']}\r\n"]}).encode()
    assert client.post("/revoke", content=body).status_code == 202
    wait_for(lambda: all(store.get_key("alice", name).disabled for name in keys))


def stall_bodies(
    store: KeyStore, signer: Signer, stalled_from: list[str], then_from: list[str]
) -> tuple[list[int], list[int]]:
    """Statuses of requests from stalled_from, whose bodies stall just under MAX_BODY until
    the requests from then_from (bodies as large, whole) were answered, and of those."""
    keys = {"github": {signer.identifier: signer.private.public_key()}}
    app = LeaksApp(KeyStore(store.engine, hasher=CHEAP, clock=store.clock), keys)
    headers = [(b"github-public-key-identifier", signer.identifier.encode())]

    async def scenario() -> tuple[list[int], list[int]]:
        release, stalled = asyncio.Event(), asyncio.Semaphore(0)

        async def request(address: str, stall: bool) -> int:
            chunks = [b" " * (MAX_BODY - 1), b""]
            answers: list[dict[str, Any]] = []

            async def receive() -> dict[str, Any]:
                chunk = chunks.pop(0)
                if stall and not chunk:  # the first chunk is counted: hold the rest back
                    stalled.release()
                    await release.wait()
                return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

            async def send(message: MutableMapping[str, Any]) -> None:
                answers.append(dict(message))

            scope = {
                "type": "http", "method": "POST", "path": "/github", "headers": headers,
                "client": (address, 40000),
            }  # fmt: skip
            await app(scope, receive, send)
            return int(answers[0]["status"])

        stalling = [asyncio.ensure_future(request(a, stall=True)) for a in stalled_from]
        for _ in stalled_from:
            await stalled.acquire()
        then = [await request(address, stall=False) for address in then_from]
        release.set()
        return list(await asyncio.gather(*stalling)), then

    try:
        return asyncio.run(scenario())
    finally:
        app.store.close()


def test_bodies_arriving_at_once_hold_a_bounded_memory(store: KeyStore, signer: Signer) -> None:
    """Requests from many clients whose bodies stall just under MAX_BODY hold at most
    BODIES_IN_FLIGHT bytes together: one more is answered 503 at once (1,500 such connections
    held 1.6 GB), and the stalled ones are answered as usual when their bodies end."""
    many = [f"192.0.2.{n}" for n in range(BODIES_IN_FLIGHT // MAX_BODY)]
    stalled, then = stall_bodies(store, signer, many, ["198.51.100.1"])
    assert then == [503]
    assert stalled == [401] * len(many)  # no signature: refused as any unsigned report


def test_one_client_holds_a_few_arriving_bodies_at_most(store: KeyStore, signer: Signer) -> None:
    """One client address (IPv6: its /64) with BODIES_PER_CLIENT bodies stalled gets 503 for
    one more, while another client is still served: one client alone cannot fill the bound."""
    one = ["192.0.2.1"] * BODIES_PER_CLIENT
    _, then = stall_bodies(store, signer, one, ["192.0.2.1", "192.0.2.2"])
    assert then == [503, 401]
    six = ["2001:db8::1"] * BODIES_PER_CLIENT
    _, then = stall_bodies(store, signer, six, ["2001:db8::2", "2001:db8:0:1::1"])
    assert then == [503, 401]


def test_a_database_refusing_a_leak_is_logged_with_its_reason(
    client: TestClient,
    store: KeyStore,
    signer: Signer,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A report or a revocation the database refuses (a role with a verifier's grants only) is
    503 or lost as before, and logged with the database's reason: a report's 503 was logged
    nowhere, and both said "unavailable" of a permission the operator must grant."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    reason = "permission denied for table apikey_tui_key"

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise DatabasePermissionError(f"the database role lacks a privilege (leak): {reason}")

    monkeypatch.setattr(KeyStore, "contain_leak", refuse)
    caplog.set_level(logging.INFO, "apikey_tui")
    body = report(key)
    assert client.post("/github", content=body, headers=signer.headers(body)).status_code == 503
    assert reason in logged(caplog)
    caplog.clear()
    client.post("/revoke", json={"credentials": [key]})
    wait_for(lambda: reason in logged(caplog))
    assert not store.get_key("alice", "ci").disabled


def test_a_reports_url_is_logged_escaped(
    client: TestClient, store: KeyStore, signer: Signer, caplog: pytest.LogCaptureFixture
) -> None:
    """Control characters in a report's url reach the log as escapes, never raw."""
    key = store.create_key("alice", "ci", ["project"]).plaintext
    body = report(key, url="https://github.com/o/r\x1b]2;owned\x07\r\nFORGED line\ud800")
    caplog.set_level(logging.INFO, "apikey_tui")
    assert client.post("/github", content=body, headers=signer.headers(body)).status_code == 200
    text = logged(caplog)
    assert "owned" in text and "\\x1b]2;owned\\x07\\r\\nFORGED" in text
    assert not any(c in text for c in "\x1b\x07\r\ud800")


# --- what /revoke may cost: keys made by 0.1.0 have no fingerprint -------------------------------


def without_fingerprints(store: KeyStore) -> None:
    """Make every key look like one of 0.1.0 (made before fingerprints)."""
    with store.engine.begin() as conn:
        conn.execute(sql("UPDATE apikey_tui_key SET fingerprint = NULL"))


SENTINELS = itertools.count()


def revoke_and_wait(client: TestClient, store: KeyStore, credentials: list[str]) -> None:
    """POST /revoke with a fresh key last, and wait until it is disabled: all before it is done
    (a request's tokens are judged in order, and requests one after another)."""
    name = f"sentinel-{next(SENTINELS)}"
    sentinel = store.create_key("sentinel", name, ["project"]).plaintext
    answer = client.post("/revoke", json={"credentials": [*credentials, sentinel]})
    assert answer.status_code == 202
    wait_for(lambda: store.get_key("sentinel", name).disabled)


def test_revoke_buys_one_argon2_run_a_minute_per_key_of_0_1_0(store: KeyStore) -> None:
    """999 wrong secrets for a key without a fingerprint cost one argon2 run, then one a
    minute; its right secret, sent later, revokes it and gives it its fingerprint, after which
    wrong secrets cost none."""
    created = store.create_key("alice", "old", ["project"])
    public_id = created.info.public_id
    without_fingerprints(store)
    counting = CountingHasher("cheapest", calls=[])
    assert counting.calls is not None
    now = [0.0]
    app = LeaksApp(
        KeyStore(store.engine, hasher=counting, clock=store.clock),
        {},
        revoke_per_minute=1000,
        monotonic=lambda: now[0],
    )
    forgeries = [keyformat.generate(public_id)[1] for _ in range(999)]
    with TestClient(app, client=("192.0.2.10", 1)) as client:
        revoke_and_wait(client, store, forgeries)
        assert len(counting.calls) == 1 + 1  # one wrong secret, and the sentinel
        revoke_and_wait(client, store, forgeries[:10])
        assert len(counting.calls) == 2 + 1  # none for it: its budget is spent
        now[0] += 60
        revoke_and_wait(client, store, [created.plaintext])
        assert len(counting.calls) == 3 + 2  # the right secret, checked
        assert store.get_key("alice", "old").disabled
        now[0] += 60
        revoke_and_wait(client, store, forgeries)
        assert len(counting.calls) == 5 + 1  # the fingerprint refuses every wrong one
    secret = keyformat.parse(created.plaintext).secret
    assert every_fingerprint(store)[public_id] == fingerprint(public_id, secret)


def test_ids_never_issued_read_no_audit_trail(store: KeyStore, signer: Signer) -> None:
    """Tokens of ids this database never issued, in /revoke or a signed report, cost no read
    of the audit trail (no index serves a read of it by public id: each was a whole scan)."""
    read: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if threading.current_thread().name.startswith("serve-leaks") and (
            statement.lstrip().upper().startswith("SELECT") and "apikey_tui_event" in statement
        ):
            read.append(statement)

    strangers = [keyformat.generate()[1] for _ in range(50)]
    sqlalchemy.event.listen(store.engine, "before_cursor_execute", count)
    try:
        with make_client(store, signer, revoke_per_minute=1000) as client:
            revoke_and_wait(client, store, [])
            alone = len(read)  # the sentinel's own (is this report a repeat?)
            revoke_and_wait(client, store, strangers)
            assert len(read) == 2 * alone
            body = report(*strangers)
            assert client.post("/github", content=body, headers=signer.headers(body)).json()
            assert len(read) == 2 * alone
    finally:
        sqlalchemy.event.remove(store.engine, "before_cursor_execute", count)


@dataclass(frozen=True)
class HeldHasher(SecretHasher):
    """The cheapest profile; checking a secret in `held` waits until `release` is set."""

    held: frozenset[str] = frozenset()
    release: threading.Event = field(default_factory=threading.Event)

    def verify(self, stored_hash: str, secret: str) -> bool:
        if secret in self.held:
            assert self.release.wait(60), "never released"
        return super().verify(stored_hash, secret)


def test_a_signed_report_never_waits_behind_revocations(store: KeyStore, signer: Signer) -> None:
    """With 40 revocations stuck in argon2, a signed report is still answered and acts."""
    old = [store.create_key("bob", f"old{n}", ["project"]).info.public_id for n in range(40)]
    without_fingerprints(store)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    forgeries = [keyformat.generate(public_id)[1] for public_id in old]
    hasher = HeldHasher("cheapest", frozenset(keyformat.parse(f).secret for f in forgeries))
    app = LeaksApp(
        KeyStore(store.engine, hasher=hasher, clock=store.clock),
        {"github": {signer.identifier: signer.private.public_key()}},
        revoke_per_minute=1000,
    )
    answers: list[int] = []
    with TestClient(app, client=("192.0.2.10", 1)) as client:
        try:
            for forgery in forgeries:
                assert client.post("/revoke", json={"credentials": [forgery]}).status_code == 202
            body = report(key)
            reporting = threading.Thread(
                target=lambda: answers.append(
                    client.post("/github", content=body, headers=signer.headers(body)).status_code
                ),
                daemon=True,
            )
            reporting.start()
            wait_for(lambda: answers == [200])
            assert store.get_key("alice", "ci").disabled
        finally:
            hasher.release.set()  # before the app stops: it finishes the revocations first
