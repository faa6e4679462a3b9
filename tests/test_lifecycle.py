"""Key lifecycle on SQLite and the real PostgreSQL with a fake clock: expiry and the lifetime
policy, rotation with a grace window, disable and enable, unused keys, and their CLI commands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.errors import InvalidInputError, KeyStateError, LifetimePolicyError
from apikey_tui.hashing import fingerprint
from apikey_tui.names import NEVER, format_duration, parse_duration, parse_expiry
from apikey_tui.store import CreatedKey, Credential, KeyStore
from tests.conftest import ACTOR, CHEAP, FakeClock, every_fingerprint

SECOND = timedelta(seconds=1)


@pytest.fixture
def lstore(database_url: str, clock: FakeClock) -> Iterator[KeyStore]:
    """A KeyStore on a fresh database (SQLite, then PostgreSQL) that reads the fake clock."""
    key_store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock)
    yield key_store
    key_store.close()


def _z(moment: datetime) -> str:
    """A moment as the audit trail writes it."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _credential(store: KeyStore, public_id: str) -> Credential:
    found = store.credential(public_id)
    assert found is not None
    return found


def _verifies(store: KeyStore, created: CreatedKey) -> bool:
    """Whether the database still answers for this key with a hash its secret matches."""
    parts = keyformat.parse(created.plaintext)
    found = store.credential(parts.public_id)
    return found is not None and store.hasher.verify(found.secret_hash, parts.secret)


def _actions(store: KeyStore) -> list[tuple[str, str]]:
    return [(e.action, e.detail) for e in reversed(store.events(limit=100))]


# --- durations ------------------------------------------------------------------------------------


def test_durations_read_and_write_one_way() -> None:
    """30s, 15m, 24h, 90d and 0 parse to spans and are written back in the largest exact unit."""
    assert [parse_duration(t) for t in ("30s", "15m", "24h", "90d", "0")] == [
        timedelta(seconds=30),
        timedelta(minutes=15),
        timedelta(hours=24),
        timedelta(days=90),
        timedelta(0),
    ]
    assert [format_duration(timedelta(seconds=s)) for s in (86_400, 90, 7_200, 0)] == [
        "1d",
        "90s",
        "2h",
        "0",
    ]


@pytest.mark.parametrize("text", ["", "5", "5x", "-1d", "1.5h", "1d2h", "37000d", "d"])
def test_a_bad_duration_is_one_line_naming_the_form(text: str) -> None:
    """A malformed or huge duration is refused with one line that shows how to write one."""
    with pytest.raises(InvalidInputError) as info:
        parse_duration(text)
    assert "\n" not in str(info.value)
    assert "30s, 15m, 24h or 90d" in str(info.value) or "100 years" in str(info.value)


def test_expiry_is_a_span_a_moment_or_never() -> None:
    """An expiry is a duration, an ISO date (00:00 UTC), a date and time (UTC if naive) or never."""
    assert parse_expiry("90d") == timedelta(days=90)
    assert parse_expiry("2030-02-01") == datetime(2030, 2, 1, tzinfo=UTC)
    assert parse_expiry("2030-02-01T10:00+02:00") == datetime(2030, 2, 1, 8, tzinfo=UTC)
    assert parse_expiry("2030-02-01 10:00") == datetime(2030, 2, 1, 10, tzinfo=UTC)
    assert parse_expiry("Never") == NEVER
    with pytest.raises(InvalidInputError, match="ISO date"):
        parse_expiry("next tuesday")


# --- expiry ---------------------------------------------------------------------------------------


def test_credential_carries_the_expiry_to_the_second(lstore: KeyStore, clock: FakeClock) -> None:
    """A key made to expire in 1h reports that moment; it is live at -1s and expired at it."""
    created = lstore.create_key("alice", "ci", ["project"], expires=timedelta(hours=1))
    expiry = clock.start + timedelta(hours=1)
    assert created.info.expires_at == expiry
    clock.advance(timedelta(hours=1) - SECOND)
    found = _credential(lstore, created.info.public_id)
    assert (found.expires_at, found.disabled) == (expiry, False)
    assert not found.info.expired(clock()) and not found.info.disabled
    clock.advance(SECOND)
    found = _credential(lstore, created.info.public_id)  # still returned, marked, for the verifier
    assert found.expires_at == expiry and found.info.expired(clock())
    assert lstore.get_key("alice", "ci").expired(clock())


def test_expiry_at_a_moment_and_never(lstore: KeyStore, clock: FakeClock) -> None:
    """An ISO moment is kept to the second; NEVER and no expiry mean none without a policy."""
    moment = clock.start + timedelta(days=151, seconds=15, microseconds=999_999)
    at = lstore.create_key("alice", "at", ["project"], expires=moment)
    assert at.info.expires_at == moment.replace(microsecond=0)
    assert lstore.create_key("alice", "never", ["project"], expires=NEVER).info.expires_at is None
    assert lstore.create_key("alice", "plain", ["project"]).info.expires_at is None
    with pytest.raises(InvalidInputError, match="not in the future"):
        lstore.create_key("alice", "past", ["project"], expires=clock.start - SECOND)
    with pytest.raises(InvalidInputError, match="not in the future"):
        lstore.create_key("alice", "zero", ["project"], expires=timedelta(0))


def test_set_expiry_is_recorded_and_held_to_the_policy(lstore: KeyStore, clock: FakeClock) -> None:
    """set_expiry moves the expiry (or clears it), records key.expire-set, and obeys the policy."""
    lstore.create_key("alice", "ci", ["project"])
    clock.advance(timedelta(days=10))
    info = lstore.set_expiry("alice", "ci", timedelta(days=5))
    assert info.expires_at == clock.start + timedelta(days=15)
    assert lstore.set_expiry("alice", "ci", NEVER).expires_at is None
    lstore.set_lifetime_policy(timedelta(days=30))
    # counted from creation: 10 days are gone, so 25 more days break a 30-day policy
    with pytest.raises(LifetimePolicyError, match="at most 30d"):
        lstore.set_expiry("alice", "ci", timedelta(days=25))
    assert lstore.set_expiry(
        "alice", "ci", timedelta(days=20)
    ).expires_at == clock.start + timedelta(days=30)
    details = [d for a, d in _actions(lstore) if a == "key.expire-set"]
    assert details == [
        f"expires {_z(clock.start + timedelta(days=15))}",
        "never expires",
        f"expires {_z(clock.start + timedelta(days=30))}",
    ]


# --- the lifetime policy --------------------------------------------------------------------------


def test_policy_applies_to_new_keys_and_lists_those_that_break_it(
    lstore: KeyStore, clock: FakeClock
) -> None:
    """New keys get at most the maximum (refused beyond it); old keys are listed, never changed."""
    lstore.create_key("alice", "eternal", ["project"])
    lstore.create_key("bob", "long", ["project"], expires=timedelta(days=400))
    lstore.create_key("bob", "short", ["project"], expires=timedelta(days=30))
    violating = lstore.set_lifetime_policy(timedelta(days=365))
    assert [(k.owner, k.name) for k in violating] == [("alice", "eternal"), ("bob", "long")]
    assert lstore.lifetime_policy() == timedelta(days=365)
    assert [k.name for k in lstore.list_keys("bob", violating_policy=True)] == ["long"]
    assert _verifies(lstore, lstore.create_key("carol", "x", ["project"]))  # within the policy
    assert _credential(lstore, lstore.get_key("alice", "eternal").public_id).expires_at is None

    default = lstore.create_key("alice", "default", ["project"])
    assert default.info.expires_at == clock.start + timedelta(days=365)
    with pytest.raises(LifetimePolicyError, match="at most 365d"):
        lstore.create_key("alice", "too-long", ["project"], expires=timedelta(days=366))
    with pytest.raises(LifetimePolicyError, match="never expires is refused"):
        lstore.create_key("alice", "never", ["project"], expires=NEVER)
    assert lstore.create_key("alice", "max", ["project"], expires=timedelta(days=365))

    # rotating a key that breaks the policy brings it within: its lifetime is capped
    rotated = lstore.rotate_key("bob", "long", grace=timedelta(0))
    assert rotated.info.expires_at == clock.start + timedelta(days=365)
    assert [k.name for k in lstore.list_keys(violating_policy=True)] == ["eternal"]

    assert lstore.set_lifetime_policy(None) == []
    assert lstore.lifetime_policy() is None
    assert lstore.list_keys(violating_policy=True) == []
    policy_events = [d for a, d in _actions(lstore) if a == "policy.set"]
    assert policy_events == ["max-lifetime 365d; 2 existing keys break it", "max-lifetime none"]
    with pytest.raises(InvalidInputError):
        lstore.set_lifetime_policy(timedelta(0))


# --- rotation with grace --------------------------------------------------------------------------


def test_previous_id_works_until_the_grace_ends_at_the_second(
    lstore: KeyStore, clock: FakeClock
) -> None:
    """After rotate --grace 24h both secrets verify; the old one is gone from that second on."""
    first = lstore.create_key("alice", "ci", ["project", "serving"])
    clock.advance(timedelta(hours=1))
    second = lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    end = clock() + timedelta(hours=24)
    old_id = first.info.public_id
    assert second.info.public_id != old_id
    assert (second.info.old_public_id, second.info.grace_until) == (old_id, end)
    assert _verifies(lstore, first) and _verifies(lstore, second)

    clock.advance(timedelta(hours=24) - SECOND)
    old = _credential(lstore, old_id)
    assert (old.info.owner, old.info.name, old.info.public_id) == ("alice", "ci", old_id)
    assert old.info.scopes == ("project", "serving") and old.expires_at == end
    assert old.fingerprint == fingerprint(old_id, keyformat.parse(first.plaintext).secret)
    assert old_id in every_fingerprint(lstore)
    assert _credential(lstore, second.info.public_id).expires_at is None

    clock.advance(SECOND)
    assert lstore.credential(old_id) is None
    assert old_id not in every_fingerprint(lstore)
    assert lstore.get_key("alice", "ci").old_public_id is None  # shown no more
    assert _verifies(lstore, second)


def test_a_scope_change_applies_to_both_secrets(lstore: KeyStore) -> None:
    """Both secrets are one key: re-scoping during a grace changes what the old one may reach."""
    first = lstore.create_key("alice", "ci", ["project", "serving"])
    lstore.rotate_key("alice", "ci", grace=timedelta(hours=1))
    lstore.set_key_scopes("alice", "ci", ["project"])
    assert _credential(lstore, first.info.public_id).info.scopes == ("project",)


def test_the_old_secret_never_outlives_the_keys_expiry(lstore: KeyStore, clock: FakeClock) -> None:
    """A grace longer than the time left stops at the old expiry; the new secret gets a new life."""
    first = lstore.create_key("alice", "ci", ["project"], expires=timedelta(hours=2))
    clock.advance(timedelta(hours=1))
    second = lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    assert second.info.grace_until == clock.start + timedelta(hours=2)
    assert second.info.expires_at == clock() + timedelta(hours=2)  # the lifetime it had
    assert _credential(lstore, first.info.public_id).expires_at == clock.start + timedelta(hours=2)
    clock.advance(timedelta(hours=1))
    assert lstore.credential(first.info.public_id) is None
    # an expired key rotated gives its old secret no grace at all
    clock.advance(timedelta(hours=5))
    third = lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    assert third.info.old_public_id is None and lstore.credential(second.info.public_id) is None


def test_an_explicit_expiry_on_rotation(lstore: KeyStore, clock: FakeClock) -> None:
    """rotate --expires sets the new secret's expiry; the old secret keeps its own grace."""
    first = lstore.create_key("alice", "ci", ["project"])
    second = lstore.rotate_key(
        "alice", "ci", grace=timedelta(minutes=15), expires=timedelta(days=30)
    )
    assert second.info.expires_at == clock.start + timedelta(days=30)
    assert _credential(lstore, first.info.public_id).expires_at == clock.start + timedelta(
        minutes=15
    )
    detail = _actions(lstore)[-1][1]
    assert detail == (
        f"replaces {first.info.public_id}, which works until "
        f"{_z(clock.start + timedelta(minutes=15))}; expires {_z(clock.start + timedelta(days=30))}"
    )


def test_rotating_twice_ends_the_first_grace_at_once(lstore: KeyStore, clock: FakeClock) -> None:
    """A second rotation during a grace stops the oldest secret now; the middle one gets a grace."""
    first = lstore.create_key("alice", "ci", ["project"])
    second = lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    clock.advance(timedelta(hours=1))
    third = lstore.rotate_key("alice", "ci", grace=timedelta(hours=2))
    assert lstore.credential(first.info.public_id) is None
    assert _verifies(lstore, second) and _verifies(lstore, third)
    assert third.info.old_public_id == second.info.public_id
    assert _credential(lstore, second.info.public_id).expires_at == clock() + timedelta(hours=2)
    action, detail = _actions(lstore)[-1]
    assert action == "key.rotate" and f"ends the grace of {first.info.public_id} now" in detail


def test_end_grace_stops_the_old_secret_now(lstore: KeyStore, clock: FakeClock) -> None:
    """end_grace stops the previous secret at once; with none in grace it is refused."""
    first = lstore.create_key("alice", "ci", ["project"])
    second = lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    info = lstore.end_grace("alice", "ci")
    assert (info.old_public_id, info.grace_until) == (None, None)
    assert lstore.credential(first.info.public_id) is None and _verifies(lstore, second)
    assert _actions(lstore)[-1] == ("key.end-grace", f"{first.info.public_id} stopped working")
    with pytest.raises(KeyStateError, match="no previous secret in grace"):
        lstore.end_grace("alice", "ci")
    lstore.rotate_key("alice", "ci", grace=timedelta(minutes=5))
    clock.advance(timedelta(minutes=5))
    with pytest.raises(KeyStateError):  # a grace that ended by itself cannot be ended again
        lstore.end_grace("alice", "ci")


def test_grace_zero_is_recreate(lstore: KeyStore) -> None:
    """rotate with grace 0 stops the old secret at once, like recreate, and leaves no old id."""
    first = lstore.create_key("alice", "ci", ["project"])
    second = lstore.rotate_key("alice", "ci", grace=timedelta(0))
    assert second.info.old_public_id is None and lstore.credential(first.info.public_id) is None
    assert _actions(lstore)[-1] == ("key.rotate", f"replaces {first.info.public_id} at once")
    third = lstore.recreate_key("alice", "ci")
    assert lstore.credential(second.info.public_id) is None and _verifies(lstore, third)
    assert _actions(lstore)[-1] == ("key.recreate", f"replaces {second.info.public_id}")
    with pytest.raises(InvalidInputError):
        lstore.rotate_key("alice", "ci", grace=-SECOND)


def test_use_of_the_previous_id_counts_as_use_of_the_key(
    lstore: KeyStore, clock: FakeClock
) -> None:
    """record_use of an id in grace moves the key's last use forward."""
    first = lstore.create_key("alice", "ci", ["project"])
    lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    clock.advance(timedelta(minutes=3))
    lstore.record_use({first.info.public_id: clock()})
    assert lstore.get_key("alice", "ci").last_used_at == clock()


# --- disable and enable ---------------------------------------------------------------------------


def test_disable_and_enable_show_in_credential_for_both_secrets(
    lstore: KeyStore, database_url: str, clock: FakeClock
) -> None:
    """Disabling marks both secrets, keeps name, scopes and history; enabling clears it."""
    first = lstore.create_key("alice", "ci", ["project", "serving"])
    second = lstore.rotate_key("alice", "ci", grace=timedelta(hours=24))
    clock.advance(timedelta(minutes=1))
    info = lstore.disable_key("alice", "ci", "leaked in a CI log")
    assert (info.disabled, info.disabled_at, info.disabled_reason) == (
        True,
        clock(),
        "leaked in a CI log",
    )
    assert info.disabled and info.scopes == ("project", "serving")
    # another process (another engine) sees it at its next read
    other = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR, clock=clock, create=False)
    try:
        assert _credential(other, first.info.public_id).disabled
        assert _credential(other, second.info.public_id).disabled
        with pytest.raises(KeyStateError, match="already disabled"):
            other.disable_key("alice", "ci")
        other.enable_key("alice", "ci")
    finally:
        other.close()
    assert not _credential(lstore, first.info.public_id).disabled
    assert not _credential(lstore, second.info.public_id).disabled
    assert lstore.get_key("alice", "ci").disabled_reason is None
    with pytest.raises(KeyStateError, match="is not disabled"):
        lstore.enable_key("alice", "ci")
    actions = _actions(lstore)
    assert ("key.disable", "leaked in a CI log") in actions
    assert ("key.enable", f"disabled since {_z(clock.start + timedelta(minutes=1))}") in actions
    detail = lstore.key_detail("alice", "ci")
    assert [e.action for e in detail.events][:2] == ["key.enable", "key.disable"]
    assert detail.origin is not None and detail.origin.action == "key.rotate"


def test_a_bad_disable_reason_is_refused(lstore: KeyStore) -> None:
    """A reason with a control character or over 200 characters changes nothing."""
    lstore.create_key("alice", "ci", ["project"])
    for reason in ("\x1b[2J", "x" * 201):
        with pytest.raises(InvalidInputError, match="reason"):
            lstore.disable_key("alice", "ci", reason)
    assert not lstore.get_key("alice", "ci").disabled


# --- listings for cron and audits -----------------------------------------------------------------


def test_expiring_lists_keys_that_expire_within_the_span(
    lstore: KeyStore, clock: FakeClock
) -> None:
    """--expiring 14d lists keys expiring within 14 days, not expired ones nor later ones."""
    lstore.create_key("alice", "gone", ["project"], expires=timedelta(hours=1))
    lstore.create_key("alice", "soon", ["project"], expires=timedelta(days=3))
    lstore.create_key("bob", "edge", ["project"], expires=timedelta(days=14, hours=2))
    lstore.create_key("alice", "later", ["project"], expires=timedelta(days=30))
    lstore.create_key("alice", "never", ["project"])
    clock.advance(timedelta(hours=2))
    assert [k.name for k in lstore.list_keys(expiring_within=timedelta(days=14))] == [
        "soon",
        "edge",
    ]
    assert [k.name for k in lstore.list_keys("alice", expiring_within=timedelta(days=14))] == [
        "soon"
    ]


def test_unused_lists_keys_not_used_for_the_span(lstore: KeyStore, clock: FakeClock) -> None:
    """--unused 90d lists keys last used, or never used and created, 90 days ago or more."""
    used_long_ago = lstore.create_key("alice", "used-long-ago", ["project"])
    lstore.create_key("alice", "never-used", ["project"])
    used_lately = lstore.create_key("alice", "used-lately", ["project"])
    lstore.record_use({used_long_ago.info.public_id: clock()})
    clock.advance(timedelta(days=50))
    lstore.record_use({used_lately.info.public_id: clock()})
    lstore.create_key("alice", "new", ["project"])
    clock.advance(timedelta(days=40))
    assert [k.name for k in lstore.list_keys(unused_for=timedelta(days=90))] == [
        "never-used",
        "used-long-ago",
    ]
    assert lstore.list_keys(unused_for=timedelta(days=91)) == []


# --- the command line -----------------------------------------------------------------------------


def _cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database-url", url, "--owner", "alice", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _usage(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(["--database-url", url, "--owner", "alice", *args])
    out, err = capsys.readouterr()
    assert (info.value.code, out) == (2, "") and err.count("\n") == 1, err
    return err


def test_cli_create_with_expiry_and_show(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """keys create --expires 90d prints the key alone; --json and keys show carry the expiry."""
    code, out, err = _cli(capsys, database_url, "keys", "create", "ci", "--scope", "project",
                          "--expires", "90d")  # fmt: skip
    assert code == 0 and keyformat.parse(out.strip()) and "It expires at" in err
    code, out, _ = _cli(capsys, database_url, "keys", "show", "ci", "--json")
    shown = json.loads(out)
    expires = datetime.fromisoformat(shown["expires_at"])
    assert timedelta(days=89, hours=23) < expires - datetime.now(UTC) <= timedelta(days=90)
    assert (shown["disabled"], shown["old_public_id"], shown["grace_until"]) == (False, None, None)
    code, out, _ = _cli(capsys, database_url, "keys", "show", "ci")
    assert code == 0 and "state:" in out and "active" in out and "expires:" in out
    code, out, _ = _cli(capsys, database_url, "keys", "list")
    assert "EXPIRES (UTC)" in out and "STATE" in out


def test_cli_rotate_prints_the_new_key_once_and_ends_the_grace(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """keys rotate --grace 24h prints the new key alone; --end-grace stops the old one."""
    _, old, _ = _cli(capsys, database_url, "keys", "create", "ci", "--scope", "project")
    code, out, err = _cli(capsys, database_url, "keys", "rotate", "ci", "--grace", "24h")
    new = keyformat.parse(out.strip())
    old_id = keyformat.parse(old.strip()).public_id
    assert code == 0 and new.public_id != old_id and "keeps working until" in err
    assert out.strip() not in err
    code, out, _ = _cli(capsys, database_url, "keys", "show", "ci", "--json")
    assert json.loads(out)["old_public_id"] == old_id
    code, out, err = _cli(capsys, database_url, "keys", "rotate", "ci", "--end-grace", "--json")
    assert code == 0 and json.loads(out)["old_public_id"] is None and "stopped" in err
    code, _, err = _cli(capsys, database_url, "keys", "rotate", "ci", "--end-grace")
    assert code == 1 and err.count("\n") == 1 and "no previous secret in grace" in err
    code, out, err = _cli(capsys, database_url, "keys", "rotate", "ci", "--grace", "0", "--json")
    assert code == 0 and json.loads(out)["key"] and "stopped working" in err


def test_cli_disable_enable_and_policy(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """disable --reason, enable, policy set/show and --violating-policy work and are audited."""
    _cli(capsys, database_url, "keys", "create", "ci", "--scope", "project")
    code, out, err = _cli(capsys, database_url, "keys", "disable", "ci", "--reason", "leak",
                          "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["disabled_reason"] == "leak" and "401" in err
    code, _, err = _cli(capsys, database_url, "keys", "disable", "ci")
    assert code == 1 and err.count("\n") == 1 and "already disabled" in err
    assert _cli(capsys, database_url, "keys", "enable", "ci")[0] == 0
    code, _, err = _cli(capsys, database_url, "keys", "enable", "ci")
    assert code == 1 and "is not disabled" in err

    assert _cli(capsys, database_url, "policy", "show")[1] == "max-lifetime none\n"
    code, out, err = _cli(capsys, database_url, "policy", "set", "max-lifetime", "365d", "--json")
    data = json.loads(out)
    assert code == 0 and data["max_lifetime"] == "365d" and data["max_lifetime_seconds"] == 31536000
    assert [k["name"] for k in data["violating"]] == ["ci"] and "1 existing key breaks" in err
    code, out, _ = _cli(capsys, database_url, "keys", "list", "--all", "--violating-policy")
    assert code == 0 and "ci" in out
    code, _, err = _cli(capsys, database_url, "keys", "create", "x", "--scope", "project",
                        "--expires", "400d")  # fmt: skip
    assert code == 1 and err.count("\n") == 1 and "at most 365d" in err
    code, out, _ = _cli(capsys, database_url, "keys", "create", "y", "--scope", "project", "--json")
    assert code == 0 and json.loads(out)["expires_at"] is not None
    assert _cli(capsys, database_url, "policy", "set", "max-lifetime", "none")[0] == 0
    assert json.loads(_cli(capsys, database_url, "policy", "show", "--json")[1]) == {
        "max_lifetime": None,
        "max_lifetime_seconds": None,
    }
    _, out, _ = _cli(capsys, database_url, "events", "--json")
    actions = [e["action"] for e in json.loads(out)]
    assert {"key.disable", "key.enable", "policy.set"} <= set(actions)


def test_cli_listings_for_cron_are_quiet_when_nothing_matches(
    capsys: pytest.CaptureFixture[str], database_url: str
) -> None:
    """keys list --expiring/--unused print nothing and exit 0 when no key matches, else the keys."""
    _cli(capsys, database_url, "keys", "create", "ci", "--scope", "project", "--expires", "30d")
    assert _cli(capsys, database_url, "keys", "list", "--all", "--expiring", "14d") == (0, "", "")
    assert _cli(capsys, database_url, "keys", "list", "--unused", "90d") == (0, "", "")
    code, out, _ = _cli(capsys, database_url, "keys", "list", "--all", "--expiring", "31d")
    assert code == 0 and "ci" in out
    code, out, _ = _cli(capsys, database_url, "keys", "list", "--expiring", "14d", "--json")
    assert (code, json.loads(out)) == (0, [])


@pytest.mark.parametrize(
    "args",
    [
        ["keys", "create", "ci", "--scope", "project", "--expires", "5x"],
        ["keys", "create", "ci", "--scope", "project", "--expires", "tomorrow"],
        ["keys", "rotate", "ci"],
        ["keys", "rotate", "ci", "--grace", "1y"],
        ["keys", "rotate", "ci", "--grace", "1h", "--end-grace"],
        ["keys", "list", "--expiring", "soon"],
        ["keys", "list", "--unused", "-5d"],
        ["policy", "set", "max-lifetime", "forever"],
        ["policy", "set", "lifetime", "30d"],
        ["keys", "set-expiry", "ci", "someday"],
    ],
)
def test_cli_malformed_lifecycle_arguments_are_usage_errors(
    capsys: pytest.CaptureFixture[str], sqlite_url: str, args: list[str]
) -> None:
    """A malformed duration, expiry or option pair exits 2 with one line, doing nothing."""
    assert _cli(capsys, sqlite_url, "keys", "create", "k", "--scope", "project")[0] == 0
    _usage(capsys, sqlite_url, *args)
    _, out, _ = _cli(capsys, sqlite_url, "events", "--json")
    assert [e["action"] for e in json.loads(out)] == ["key.create"]


def test_cli_end_grace_with_expires_is_a_usage_error(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """--expires belongs to a rotation, not to --end-grace: exit 2 with one line."""
    _cli(capsys, sqlite_url, "keys", "create", "ci", "--scope", "project")
    code, out, err = _cli(capsys, sqlite_url, "keys", "rotate", "ci", "--end-grace",
                          "--expires", "30d")  # fmt: skip
    assert (code, out) == (2, "") and err.count("\n") == 1 and "--end-grace" in err


def test_cli_refusals_exit_1_and_bad_input_exit_2_in_one_line(
    capsys: pytest.CaptureFixture[str], sqlite_url: str
) -> None:
    """A missing key is refused with one line and exit 1; a past expiry is bad input, one
    line and exit 2; a bad reason a usage error of the parser (exit 2), never echoed."""
    _cli(capsys, sqlite_url, "keys", "create", "ci", "--scope", "project")
    for args, exit_code in (
        (["keys", "create", "x", "--scope", "project", "--expires", "2000-01-01"], 2),
        (["keys", "rotate", "nope", "--grace", "1h"], 1),
        (["keys", "set-expiry", "ci", "2000-01-01T00:00Z"], 2),
    ):
        code, out, err = _cli(capsys, sqlite_url, *args)
        assert (code, out) == (exit_code, "") and err.count("\n") == 1, args
    assert "\x1b" not in _usage(capsys, sqlite_url, "keys", "disable", "ci", "--reason", "\x1b[31m")
