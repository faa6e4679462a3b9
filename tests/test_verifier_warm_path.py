"""The warm path's budget: a remembered key costs a few Python calls, counted (never timed)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from apikey_tui.errors import VerifierUnavailableError
from apikey_tui.integrations.routes import route
from apikey_tui.integrations.wsgi import ApiKeyWSGIMiddleware
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from apikey_tui.verifier.freshness import CommitFreshness
from tests.conftest import CHEAP


def python_calls(call: Callable[[], object]) -> list[str]:
    """The Python functions (not C ones) that run during call, in order, by qualified name."""
    names: list[str] = []

    def profile(frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call":
            names.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return names[1:]  # call itself left out


@pytest.fixture
def warm(sqlite_url: str) -> Iterator[tuple[Verifier, str]]:
    """A verifier on SQLite and the header of a key it has verified (the key is remembered)."""
    store = KeyStore.open(sqlite_url, hasher=CHEAP)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    store.close()
    checker = Verifier.from_url(sqlite_url, hasher=CHEAP)
    header = f"ApiKey {key}"
    assert checker.verify(header, ("project",)).key_name == "ci"
    checker.verify(header, ("project",))  # the usage tally made: the steady state
    yield checker, header
    checker.close()


def test_a_warm_verify_is_four_python_calls(warm: tuple[Verifier, str]) -> None:
    """A remembered key's verify runs verify, the memory lookup, the freshness test and the
    scope test: no context manager, generator or deadline (those doubled its cost)."""
    checker, header = warm
    hits = checker.stats.hits
    calls = python_calls(lambda: checker.verify(header, ("project",)))
    assert calls == [
        "Verifier.verify",
        "Verifier._warm",
        "CommitFreshness.generation",
        "Verifier.authorize",
    ]
    assert checker.stats.hits == hits + 1


def test_a_warm_identify_and_cached_take_the_same_path(warm: tuple[Verifier, str]) -> None:
    """identify (DRF) and cached (ASGI, FastAPI) answer a remembered key by the same few calls."""
    checker, header = warm
    assert python_calls(lambda: checker.identify(header)) == [
        "Verifier.identify",
        "Verifier._warm",
        "CommitFreshness.generation",
    ]
    assert python_calls(lambda: checker.cached(header, ("project",))) == [
        "Verifier.cached",
        "Verifier._warm",
        "CommitFreshness.generation",
        "Verifier.authorize",
    ]


def test_the_wsgi_middleware_adds_few_calls_to_a_warm_check(warm: tuple[Verifier, str]) -> None:
    """A WSGI request with a remembered key costs the middleware a handful of calls around the
    verifier's four (it paid eleven more through the cold path's machinery)."""
    checker, header = warm
    app = ApiKeyWSGIMiddleware(lambda environ, start: [b"ok"], checker, [route("/", "project")])
    environ = {"REQUEST_METHOD": "GET", "PATH_INFO": "/", "HTTP_AUTHORIZATION": header}
    start: Any = None  # never called: the key passes
    assert app(environ, start) == [b"ok"]
    calls = python_calls(lambda: app(environ, start))
    assert len(calls) <= 10, calls
    assert "Verifier._answer" not in calls


def test_a_freshness_failure_on_the_warm_path_is_one_counted_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A remembered key whose database file was removed is refused with 503, counted once."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    store = KeyStore.open(url, hasher=CHEAP)
    key = store.create_key("alice", "ci", ["project"]).plaintext
    store.close()
    monkeypatch.setattr(CommitFreshness, "PLACE_CHECK", 0.0)  # look at every check
    checker = Verifier.from_url(url, hasher=CHEAP)
    try:
        checker.verify(f"ApiKey {key}")
        for suffix in ("", "-wal", "-shm"):
            (tmp_path / f"keys.db{suffix}").unlink(missing_ok=True)
        for check in (checker.verify, checker.identify):
            with pytest.raises(VerifierUnavailableError):
                check(f"ApiKey {key}")
        assert checker.stats.unavailable == 2
    finally:
        checker.close()
