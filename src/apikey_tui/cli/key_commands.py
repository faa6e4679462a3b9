"""The keys commands that change keys: create, delete, recreate, scopes, rotate, expiry, on/off."""

from __future__ import annotations

import argparse
import sys

from apikey_tui.cli import arguments as a
from apikey_tui.cli.key_listing import key_json, when
from apikey_tui.cli.output import (
    EXIT_OK,
    EXIT_REFUSED,
    OutputError,
    emit,
    stdout_failed,
    usage_error,
    write_result,
)
from apikey_tui.cli.prompts import confirmed
from apikey_tui.cli.records import MAY_CREATE, MUST_EXIST, Arg, Command, Group
from apikey_tui.errors import ApiKeyError
from apikey_tui.names import format_duration, printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from apikey_tui.cli.records import Call
    from apikey_tui.limits.model import Limit
    from apikey_tui.store import CreatedKey, Deliver, KeyInfo


ONCE_WARNING = (
    "This key is shown once. Store it like a password; it cannot be recovered. "
    "If it is lost or stolen, recreate it."
)


class _Delivery:
    """Writes a new key to stdout from inside the transaction that makes it (store.Deliver):
    a secret that could not be written is never stored, and says so in one line."""

    def __init__(self, args: argparse.Namespace, undone: str) -> None:
        self.args, self.undone, self.done = args, undone, False

    def __call__(self, created: CreatedKey) -> None:
        data = {"key": created.plaintext, **created.info.to_json()}
        try:
            write_result(self.args, data, lambda out: print(created.plaintext, file=out))
        except OSError as exc:  # a closed pipe too: nobody received the key
            undone = f": {self.undone}"
            raise stdout_failed(exc, "could not write the key to stdout", undone) from None
        self.done = True

    def run(self, make: Callable[[Deliver], CreatedKey]) -> CreatedKey:
        """Make the key with this delivery; a failure after it says the key shown is void."""
        try:
            return make(self)
        except ApiKeyError as exc:
            if not self.done or isinstance(exc, OutputError):
                raise
            # Written, then the commit failed: the secret on stdout belongs to no key.
            raise ApiKeyError(
                f"{exc}; the key written to stdout was not stored: discard it"
            ) from None


def _tell_created(created: CreatedKey, verb: str, note: str | None = None) -> int:
    """Say on stderr what was made, once the key was written and stored."""
    info = created.info
    # Everything but the key goes to stderr, so `KEY=$(apikey-tui keys create ...)` just works.
    lines = [
        f"{verb} key {info.name!r} for {printable(info.owner)} ({info.public_id}), "
        f"scopes: {', '.join(info.scopes)}.",
        ONCE_WARNING,
        _expiry_line(info),
        *([f"Limits: {limits_words(info.limits)}."] if info.limits else []),
        *([f"Networks: {info.networks.summary()}."] if info.networks else []),
        *([note] if note else []),
        # A new secret does not lift a disable (a leak's included): say so, or the new key's
        # first 401 looks like a broken recreate.
        *(
            [
                f"It is still disabled: services refuse it until "
                f"`apikey-tui keys enable {printable(info.name)} --owner {printable(info.owner)}`."
            ]
            if info.disabled
            else []
        ),
    ]
    try:
        print(*lines, sep="\n", file=sys.stderr, flush=True)
    except OSError:  # the key is stored and on stdout: unreadable notes must not fail that
        pass
    return EXIT_OK


def _expiry_line(info: KeyInfo) -> str:
    if info.expires_at is None:
        return "It never expires."
    return f"It expires at {when(info.expires_at)}."


def _whose(info: KeyInfo) -> str:
    return f"key {info.name!r} of {printable(info.owner)}"


def _go_on(args: argparse.Namespace, question: str) -> bool:
    """Ask before a destructive command in a terminal (prompts.confirmed); no: say nothing
    was done. A script (no terminal) or --yes goes on, as before."""
    if confirmed(question, assume_yes=getattr(args, "yes", False)):
        return True
    print("Cancelled: nothing was done.", file=sys.stderr)
    return False


def create(call: Call) -> int:
    from apikey_tui.networks import ENFORCE, network_rules

    store, args, owner = call.store(), call.args, call.owner
    networks = None
    if args.allow_from or args.deny_from:
        networks = network_rules(args.allow_from, args.deny_from, args.networks_mode or ENFORCE)
    elif args.networks_mode is not None:
        return usage_error("keys create: --networks-mode needs --allow-from or --deny-from")
    created = _Delivery(args, "it was not created").run(
        lambda deliver: store.create_key(
            owner,
            args.name,
            args.scope,
            expires=args.expires,
            deliver=deliver,
            limits=args.limit,
            meta=args.meta,
            tags=args.tag,
            networks=networks,
        )
    )
    return _tell_created(created, "Created")


def delete(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    old = store.get_key(owner, args.name)
    question = f"Delete {_whose(old)} ({old.public_id})? Services refuse it at once; no undo."
    if not _go_on(args, question):
        return EXIT_REFUSED
    # Only the key the question named: one recreated meanwhile is refused (KeyChangedError).
    info = store.delete_key(owner, args.name, expected_public_id=old.public_id)
    print(
        f"Deleted key {info.name!r} of {printable(info.owner)} ({info.public_id}).", file=sys.stderr
    )
    return emit(args, info.to_json(), lambda out: None)


def recreate(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    old = store.get_key(owner, args.name)
    question = (
        f"Recreate {_whose(old)} ({old.public_id})? Its secret stops working now; "
        "the new one is printed once."
    )
    if not _go_on(args, question):
        return EXIT_REFUSED
    created = _Delivery(args, f"key {args.name!r} is unchanged").run(
        lambda deliver: store.recreate_key(
            owner, args.name, expected_public_id=old.public_id, deliver=deliver
        )
    )
    return _tell_created(created, "Recreated", "The old key stopped working.")


def set_scopes(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    info = store.set_key_scopes(owner, args.name, args.scope)
    # Like every other change: a note on stderr, data (JSON) on stdout only when asked for.
    print(
        f"Key {info.name!r} of {printable(info.owner)} now has the scopes "
        f"{', '.join(info.scopes)}.",
        file=sys.stderr,
    )
    return emit(args, key_json(info, store.clock()), lambda out: None)


def limits_given(values: list[Limit | None]) -> tuple[Limit, ...] | None:
    """The limits of `set-limits … N/DURATION…`, or None when `none` is mixed with limits."""
    if None in values:
        return () if len(values) == 1 else None
    return tuple(v for v in values if v is not None)


def limits_words(limits: Sequence[Limit]) -> str:
    """Limits as a note says them: '10/s, 600/m', or 'none'."""
    return ", ".join(map(str, limits)) or "none"


def set_limits(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    limits = limits_given(args.limits)
    if limits is None:
        return usage_error("keys set-limits: give limits, or none alone")
    old = store.get_key(owner, args.name)
    done = store.set_limits_of_keys([old], limits)
    info = done.after[0]
    now, were = limits_words(info.limits), limits_words(old.limits)
    print(
        f"Key {info.name!r} of {printable(info.owner)} "
        + (
            f"keeps the limits {now} (unchanged)."
            if now == were
            else f"now has the limits {now} (were {were})."
        ),
        file=sys.stderr,
    )
    return emit(args, key_json(info, store.clock()), lambda out: None)


def set_owner_limits(call: Call) -> int:
    store, args = call.store(), call.args
    limits = limits_given(args.limits)
    if limits is None:
        return usage_error("owners set-limits: give limits, or none alone")
    done = store.set_owner_limits(args.owner_name, limits)
    print(
        f"{printable(done.owner)} now has the shared limits {limits_words(done.after)} "
        f"(were {limits_words(done.before)}); every key of {printable(done.owner)} draws "
        "from them.",
        file=sys.stderr,
    )
    if done.new:  # documented, but a typo would cap nobody: say it
        print(
            f"{printable(done.owner)} was no owner: it is now a person with no keys "
            f"(`owners list` lists the others; `owners remove {printable(done.owner)}` undoes "
            "a typo).",
            file=sys.stderr,
        )
    data = {
        "owner": done.owner,
        "new": done.new,
        "limits": [str(x) for x in done.after],
        "were": [str(x) for x in done.before],
    }
    return emit(args, data, lambda out: None)


def rotate(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    if args.end_grace and args.expires is not None:
        return usage_error("keys rotate: --expires goes with --grace, not --end-grace")
    old = store.get_key(owner, args.name)
    if args.end_grace:
        question = f"End the grace of {_whose(old)}? Its old secret stops working now."
    elif args.grace:
        question = (
            f"Rotate {_whose(old)} ({old.public_id})? Its secret keeps working for "
            f"{format_duration(args.grace)}; the new one is printed once."
        )
    else:
        question = (
            f"Rotate {_whose(old)} ({old.public_id}) with no grace? Its secret stops working "
            "now; the new one is printed once."
        )
    if not _go_on(args, question):
        return EXIT_REFUSED
    if args.end_grace:
        info = store.end_grace(owner, args.name, expected_public_id=old.public_id)
        print(f"The old secret of {_whose(info)} stopped working.", file=sys.stderr)
        return emit(args, key_json(info, store.clock()), lambda out: None)
    created = _Delivery(args, f"key {args.name!r} is unchanged").run(
        lambda deliver: store.rotate_key(
            owner,
            args.name,
            grace=args.grace,
            expires=args.expires,
            expected_public_id=old.public_id,
            deliver=deliver,
        )
    )
    note = "The old secret stopped working."
    if created.info.grace_until is not None:
        note = (
            f"The old secret ({created.info.old_public_id}) keeps working until "
            f"{when(created.info.grace_until)}; end that sooner with --end-grace."
        )
    return _tell_created(created, "Rotated", note)


def set_expiry(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    info = store.set_expiry(owner, args.name, args.when)
    now = f"expires at {when(info.expires_at)}" if info.expires_at else "never expires"
    print(f"Key {info.name!r} of {printable(info.owner)} now {now}.", file=sys.stderr)
    return emit(args, key_json(info, store.clock()), lambda out: None)


def disable(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    info = store.disable_key(owner, args.name, args.reason)
    print(
        f"Disabled key {info.name!r} of {printable(info.owner)}: services refuse it (401) "
        "until it is enabled.",
        file=sys.stderr,
    )
    return emit(args, key_json(info, store.clock()), lambda out: None)


def enable(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    info = store.enable_key(owner, args.name)
    note = " It has expired, so services still refuse it." if info.expired(store.clock()) else ""
    print(f"Enabled key {info.name!r} of {printable(info.owner)}.{note}", file=sys.stderr)
    return emit(args, key_json(info, store.clock()), lambda out: None)


CREATE = Command(
    "keys create",
    help="create a key; print it once",
    run=create,
    database=MAY_CREATE,
    arguments=(
        *a.COMMON,
        a.NAME,
        a.SCOPE,
        a.expires(),
        a.LIMIT,
        a.ALLOW_FROM,
        a.DENY_FROM,
        a.networks_mode("--networks-mode"),
        a.META,
        a.TAG,
    ),
    examples=(
        "KEY=$(apikey-tui keys create ci --scope project)",
        "apikey-tui keys create partner --scope serving --limit 10/s --limit 100000/30d",
        "apikey-tui keys create partner --scope serving --allow-from 203.0.113.0/24 "
        "--networks-mode shadow",
        "apikey-tui keys create model-client --scope serving,project --expires 90d",
        "apikey-tui keys create batch --scope project --owner svc-batch --json",
        "apikey-tui keys create etl --scope project --owner data --meta plan=gold --tag env=prod",
    ),
)

DELETE = Command(
    "keys delete",
    help="delete a key; services refuse it at once",
    run=delete,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME, a.YES),
    examples=(
        "apikey-tui keys delete ci          # asks first in a terminal",
        "apikey-tui keys delete ci --yes    # does not ask",
    ),
)

RECREATE = Command(
    "keys recreate",
    help="replace a stolen key: same name and scopes, new secret",
    run=recreate,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME, a.YES),
    examples=("KEY=$(apikey-tui keys recreate ci --yes)   # a stolen key: new secret",),
)

SET_SCOPES = Command(
    "keys set-scopes",
    help="replace a key's scopes",
    run=set_scopes,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME, a.SCOPE),
    examples=("apikey-tui keys set-scopes ci --scope project --scope serving",),
)

SET_LIMITS = Command(
    "keys set-limits",
    help="replace a key's limits (N/DURATION each, or none)",
    run=set_limits,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME, a.LIMITS),
    examples=(
        "apikey-tui keys set-limits partner 10/s 100000/30d",
        "apikey-tui keys set-limits partner none     # no limits",
    ),
)

OWNER_SET_LIMITS = Command(
    "owners set-limits",
    help="replace an owner's limits: one pool all of its keys share",
    run=set_owner_limits,
    database=MUST_EXIST,
    arguments=(
        *a.DATABASE,
        Arg("--json", action="store_true", default=argparse.SUPPRESS, help="JSON out"),
        Arg("owner_name", metavar="OWNER", type=a.owner, help="the owner whose keys share them"),
        a.LIMITS,
    ),
    examples=(
        "apikey-tui owners set-limits svc-batch 100/s 1000000/30d",
        "apikey-tui owners set-limits svc-batch none",
    ),
)

ROTATE = Command(
    "keys rotate",
    help="new id and secret, printed once; the old secret works until the grace ends",
    run=rotate,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Group(
            Arg(
                "--grace",
                type=a.duration,
                metavar="DURATION",
                help="how long the old secret keeps working (0: it stops now, like recreate)",
            ),
            Arg("--end-grace", action="store_true", help="stop the old secret now"),
            exclusive=True,
            required=True,
        ),
        a.expires(rotating=True),
        a.YES,
    ),
    examples=(
        "KEY=$(apikey-tui keys rotate ci --grace 24h)   # the old secret works one more day",
        "apikey-tui keys rotate ci --end-grace          # the old secret stops now",
    ),
)

SET_EXPIRY = Command(
    "keys set-expiry",
    help="set when a key stops working",
    run=set_expiry,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("when", type=a.expiry, metavar="WHEN", help="90d, an ISO date, or never"),
    ),
    examples=(
        "apikey-tui keys set-expiry ci 90d",
        "apikey-tui keys set-expiry ci 2030-01-31",
        "apikey-tui keys set-expiry ci never",
    ),
)

DISABLE = Command(
    "keys disable",
    help="switch a key off (reversibly); services refuse it",
    run=disable,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("--reason", default="", type=a.reason, help="why, for the audit trail (≤ 200 chars)"),
    ),
    examples=("apikey-tui keys disable ci --reason 'seen in a pastebin'",),
)

ENABLE = Command(
    "keys enable",
    help="switch a key on again",
    run=enable,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME),
    examples=("apikey-tui keys enable ci",),
)
