"""`owners add|list|change|members|remove`, `keys transfer|set-meta|set-tags` and `offboard`."""

from __future__ import annotations

import argparse
import sys

from apikey_tui.cli import arguments as a
from apikey_tui.cli.key_listing import key_json, print_rows, when
from apikey_tui.cli.output import EXIT_REFUSED, EXIT_USAGE, emit, usage_error
from apikey_tui.cli.prompts import confirmed
from apikey_tui.cli.records import MAY_CREATE, MUST_EXIST, Arg, Command
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import counted, printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import TextIO

    from apikey_tui.cli.records import Call
    from apikey_tui.store.offboarding import Holding, Preview
    from apikey_tui.store.owners import OwnerInfo

KINDS = ("person", "team", "service")  # db.models.OWNER_KINDS, without importing SQLAlchemy
JSON = Arg("--json", action="store_true", default=argparse.SUPPRESS, help="JSON out")
OWNER_NAME = Arg("owner_name", metavar="OWNER", type=a.owner, help="the owner")


def _words(pairs: tuple[tuple[str, str], ...]) -> str:
    return " ".join(f"{k}={v}" for k, v in pairs) or "-"


def _print_owners(owners: list[OwnerInfo], out: TextIO) -> None:
    rows = [
        [
            o.name,
            o.kind,
            str(o.keys),
            " ".join(o.members) or "-",
            " ".join(map(str, o.limits)) or "-",
            o.description or "-",
        ]
        for o in owners
    ]
    print_rows(["OWNER", "KIND", "KEYS", "MEMBERS", "LIMITS", "DESCRIPTION"], rows, out)


def owners_add(call: Call) -> int:
    store, args = call.store(), call.args
    info = store.add_owner(
        args.owner_name,
        args.kind,
        members=args.member,
        description=args.description,
        meta=args.meta,
    )
    members = f", members: {' '.join(info.members)}" if info.members else ""
    print(f"Added {info.kind} {printable(info.name)}{members}.", file=sys.stderr)
    return emit(args, info.to_json(), lambda out: None)


def owners_list(call: Call) -> int:
    store, args = call.store(), call.args
    owners = store.list_owners(args.kind)
    return emit(args, [o.to_json() for o in owners], lambda out: _print_owners(owners, out))


def owners_change(call: Call) -> int:
    store, args = call.store(), call.args
    meta = None if args.meta is None else _pairs_or_none(args.meta, "owners change --meta")
    if args.kind is None and args.description is None and meta is None:
        return usage_error("owners change: give --kind, --description or --meta")
    before, after = store.change_owner(
        args.owner_name, kind=args.kind, description=args.description, meta=meta
    )
    said = "unchanged" if before == after else "changed"
    print(f"{after.kind.capitalize()} {printable(after.name)} {said}.", file=sys.stderr)
    return emit(args, after.to_json(), lambda out: None)


def _pairs_or_none(values: list[tuple[str, str] | None], what: str) -> tuple[tuple[str, str], ...]:
    """The pairs given, or none for `none` alone (mixed with pairs: refused)."""
    if None in values:
        if len(values) > 1:
            raise InvalidInputError(f"{what}: give KEY=VALUE pairs, or none alone")
        return ()
    return tuple(v for v in values if v is not None)


def owners_members(call: Call) -> int:
    store, args = call.store(), call.args
    if not args.add and not args.remove:
        return usage_error("owners members: give --add or --remove")
    info = store.change_members(args.owner_name, add=args.add, remove=args.remove)
    now = " ".join(info.members) or "nobody"
    print(f"{printable(info.name)} ({info.kind}) members: {now}.", file=sys.stderr)
    return emit(args, info.to_json(), lambda out: None)


def owners_remove(call: Call) -> int:
    store, args = call.store(), call.args
    info = store.remove_owner(args.owner_name)
    print(f"Removed {info.kind} {printable(info.name)}.", file=sys.stderr)
    return emit(args, info.to_json(), lambda out: None)


def transfer(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    key = store.get_key(owner, args.name)
    done = store.transfer_keys([key], args.to)
    info = done.after[0]
    print(
        f"Key {info.name!r} ({info.public_id}) moved from {printable(key.owner)} to "
        f"{printable(info.owner)}: same secret, clients keep working.",
        file=sys.stderr,
    )
    return emit(args, key_json(info, store.clock()), lambda out: None)


def set_meta(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    meta = _pairs_or_none(args.pairs, "keys set-meta")
    done = store.set_meta_of_keys([store.get_key(owner, args.name)], meta)
    info = done.after[0]
    print(f"Key {info.name!r} metadata: {printable(_words(info.meta))}.", file=sys.stderr)
    return emit(args, key_json(info, store.clock()), lambda out: None)


def set_tags(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    tags = _pairs_or_none(args.pairs, "keys set-tags")
    done = store.set_tags_of_keys([store.get_key(owner, args.name)], tags)
    info = done.after[0]
    print(f"Key {info.name!r} tags: {printable(_words(info.tags))}.", file=sys.stderr)
    return emit(args, key_json(info, store.clock()), lambda out: None)


# What --apply would refuse of the moves ((owner, name) -> why): the dry run shows it per key.
Problems = dict[tuple[str, str], str]


def _plan(
    seen: Preview, moves: dict[tuple[str, str], str], holding: Holding, problems: Problems
) -> str:
    key = holding.key
    to = moves.get((key.owner, key.name))
    if (why := problems.get((key.owner, key.name))) is not None:
        return f"refused: transfer to {to}: {why}"
    if to is not None:
        return f"transfer to {to}"
    if "owns" in holding.why:
        return "stays disabled" if key.disabled else "disable"
    return "keep"


def _print_preview(
    seen: Preview,
    moves: dict[tuple[str, str], str],
    problems: Problems,
    out: TextIO,
    now: object,
) -> None:
    from datetime import datetime

    from apikey_tui.store.states import marker

    assert isinstance(now, datetime)
    keys = seen.keys
    print(f"{printable(seen.person)} holds {counted(len(keys), 'key')}.", file=out)
    if keys:
        rows = [
            [
                h.key.owner,
                h.key.name,
                marker(h.key, now)[0],
                when(h.key.last_used_at) if h.key.last_used_at else "never",
                ", ".join(f"{s or '(none)'} {n}" for s, n in h.busiest) or "-",
                " ".join(h.why),
                printable(_plan(seen, moves, h, problems)),
            ]
            for h in keys
        ]
        header = ["OWNER", "NAME", "STATE", "LAST USED", "BUSIEST SCOPES (30D)", "WHY", "APPLY"]
        print_rows(header, rows, out)
    for m in seen.memberships:
        others = ", ".join(m.others) if m.others else "no one else: add someone"
        print(f"Member of {printable(m.owner)} ({m.kind}; {others}).", file=out)


def offboard(call: Call) -> int:
    from apikey_tui.store.offboarding import transfers_of

    store, args = call.store(), call.args
    if args.undo is not None:
        if args.apply or args.transfer or args.reason:
            return usage_error(
                "offboard: --undo goes alone (not with --apply, --transfer, --reason)"
            )
        return _undo(call)
    seen = store.offboard_preview(args.person)
    moves = transfers_of(seen, args.transfer)
    # The checks --apply makes, made now: a dry run that passes is one --apply takes.
    problems = store.offboard_problems(seen, moves) if moves else {}
    now = store.clock()
    plan = {f"{h.key.owner}/{h.key.name}": _plan(seen, moves, h, problems) for h in seen.keys}
    data = {**seen.to_json(now), "plan": plan, "applied": False}
    refused = ""
    if problems:
        (owner, name), why = next(iter(problems.items()))
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        refused = f"apikey-tui: --apply would refuse the transfer of {owner}/{name}: {why}{more}"
    if not args.apply:
        done = emit(args, data, lambda out: _print_preview(seen, moves, problems, out, now))
        print(
            f"Dry run: nothing was changed. `offboard {args.person} --apply` disables "
            f"{printable(args.person)}'s own keys, transfers what --transfer names, keeps "
            "the rest and ends the memberships (one batch, undoable).",
            file=sys.stderr,
        )
        if refused:  # exit 2: the --transfer given is wrong, as --apply would say
            print(printable(refused), file=sys.stderr)
            return EXIT_USAGE
        return done
    if refused:
        done_note = "" if "nothing was done" in refused else "; nothing was done"
        print(f"{printable(refused)}{done_note}", file=sys.stderr)
        return EXIT_USAGE
    if not seen.keys and not seen.memberships:
        print(f"{printable(args.person)} holds nothing; nothing was done.", file=sys.stderr)
        return emit(args, data, lambda out: None)
    _print_preview(seen, moves, problems, sys.stderr, now)
    # Asked in a terminal, and no --yes: an offboarding is decided looking at its preview.
    if not confirmed(f"Offboard {args.person} as listed?", assume_yes=False):
        print("Cancelled: nothing was done.", file=sys.stderr)
        return EXIT_REFUSED
    batch = store.offboard(seen, reason=args.reason, transfers=moves)
    print(
        f"Offboarded {printable(args.person)}: {counted(len(batch.after), 'key')} changed, "
        f"{counted(len(batch.memberships), 'membership')} ended (batch {batch.id}; "
        f"`offboard {args.person} --undo` reverses it).",
        file=sys.stderr,
    )
    return emit(args, {**data, "applied": True, "batch": batch.id}, lambda out: None)


def _undo(call: Call) -> int:
    """`offboard PERSON --undo [BATCH]`: the offboarding read from the audit trail, shown,
    asked (in a terminal, default no), then reversed whole by the app's undo."""
    from apikey_tui.store.offboarding import NoOffboardingError

    store, args = call.store(), call.args
    try:
        done = store.offboarding(args.person, args.undo or None)
    except NoOffboardingError as exc:  # a person or batch the trail does not know: usage
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    person = printable(args.person)
    print(f"Undo the offboarding of {person} (batch {done.id}):", file=sys.stderr)
    for was, key in zip(done.before, done.after, strict=True):
        what = f"back to {was.owner}" if was.owner != key.owner else "enable"
        print(f"  {printable(key.owner)}/{printable(key.name)}: {what}", file=sys.stderr)
    for owner, _ in done.memberships:
        print(f"  back in {printable(owner)}", file=sys.stderr)
    if not confirmed(f"Undo the offboarding of {args.person}?", assume_yes=False):
        print("Cancelled: nothing was done.", file=sys.stderr)
        return EXIT_REFUSED
    undo = store.undo(done)
    now = store.clock()
    moved = sum(b.owner != a.owner for b, a in zip(done.before, done.after, strict=True))
    print(
        f"Undid the offboarding of {person} (batch {done.id}): "
        f"{counted(len(done.after) - moved)} enabled, {moved} moved back, "
        f"{counted(len(done.memberships), 'membership')} restored (batch {undo.id}).",
        file=sys.stderr,
    )
    data = {
        "person": args.person,
        "undone": done.id,
        "batch": undo.id,
        "keys": [key_json(k, now) for k in undo.after],
        "memberships": [{"owner": o, "member": m} for o, m in done.memberships],
    }
    return emit(args, data, lambda out: None)


def batch_id(text: str) -> str:
    """A batch id (argparse type): 12 hex digits, as the audit trail and --apply show it."""
    from apikey_tui.store.audit import batch_of

    if text and batch_of(f"batch {text}") != text:  # "": --undo alone (argparse types const)
        raise argparse.ArgumentTypeError(f"expected a batch id of 12 hex digits, got {text[:40]!a}")
    return text


def transfer_pair(text: str) -> tuple[str, str]:
    """FROM=TO: FROM an owner or OWNER/NAME, TO an owner."""
    source, to = a.pair(text)
    a.owner(source.partition("/")[0])
    a.owner(to)
    return source, to


OWNERS_ADD = Command(
    "owners add",
    help="add a person, team or service account",
    run=owners_add,
    database=MAY_CREATE,  # a first command, as `keys create` is (docs/reference/owners.md)
    arguments=(
        *a.DATABASE,
        JSON,
        OWNER_NAME,
        Arg("--kind", required=True, choices=KINDS, help="person, team or service (account)"),
        Arg(
            "--member",
            action="append",
            type=a.owner,
            default=[],
            metavar="PERSON",
            help="a team's member or a service account's responsible person; repeat it",
        ),
        Arg("--description", default="", help="what it is, for admins (≤ 200 chars)"),
        a.META,
    ),
    examples=(
        "apikey-tui owners add payments --kind team --member alice --member bob",
        "apikey-tui owners add svc-billing --kind service --member alice --meta tier=gold",
    ),
)

OWNERS_LIST = Command(
    "owners list",
    help="every owner: kind, key count, members, limits",
    run=owners_list,
    database=MUST_EXIST,
    arguments=(*a.DATABASE, JSON, Arg("--kind", choices=KINDS, help="only owners of this kind")),
    examples=("apikey-tui owners list", "apikey-tui owners list --kind team --json"),
)

OWNERS_CHANGE = Command(
    "owners change",
    help="change an owner's kind, description or metadata",
    run=owners_change,
    database=MUST_EXIST,
    arguments=(
        *a.DATABASE,
        JSON,
        OWNER_NAME,
        Arg("--kind", choices=KINDS, help="person, team or service"),
        Arg("--description", help="what it is (≤ 200 chars)"),
        Arg(
            "--meta",
            action="append",
            type=a.pair_or_none,
            metavar="KEY=VALUE",
            help="the owner's metadata, all of it (or none); services read it as caller.meta",
        ),
    ),
    examples=(
        "apikey-tui owners change payments --description 'the payments team'",
        "apikey-tui owners change payments --meta cost-centre=42 --meta region=eu",
    ),
)

OWNERS_MEMBERS = Command(
    "owners members",
    help="add or remove a team's members or a service account's people",
    run=owners_members,
    database=MUST_EXIST,
    arguments=(
        *a.DATABASE,
        JSON,
        OWNER_NAME,
        Arg("--add", action="append", type=a.owner, default=[], metavar="PERSON"),
        Arg("--remove", action="append", type=a.owner, default=[], metavar="PERSON"),
    ),
    examples=("apikey-tui owners members payments --add carol --remove bob",),
)

OWNERS_REMOVE = Command(
    "owners remove",
    help="remove an owner that owns no key",
    run=owners_remove,
    database=MUST_EXIST,
    arguments=(*a.DATABASE, JSON, OWNER_NAME),
    examples=("apikey-tui owners remove bob",),
)

TRANSFER = Command(
    "keys transfer",
    help="give a key to another owner; same secret, clients keep working",
    run=transfer,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("--to", required=True, type=a.owner, metavar="OWNER", help="the new owner"),
    ),
    examples=("apikey-tui keys transfer ci --owner alice --to payments",),
)

SET_META = Command(
    "keys set-meta",
    help="replace a key's metadata (services read it as caller.meta)",
    run=set_meta,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("pairs", nargs="+", type=a.pair_or_none, metavar="KEY=VALUE", help="or none"),
    ),
    examples=("apikey-tui keys set-meta partner plan=gold region=eu",),
)

SET_TAGS = Command(
    "keys set-tags",
    help="replace a key's tags (for filters: tag:env=prod)",
    run=set_tags,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("pairs", nargs="+", type=a.pair_or_none, metavar="KEY=VALUE", help="or none"),
    ),
    examples=("apikey-tui keys set-tags partner env=prod team=payments",),
)

OFFBOARD = Command(
    "offboard",
    help="what a person holds and what breaks without them; --apply to act",
    run=offboard,
    database=MUST_EXIST,
    arguments=(
        *a.DATABASE,
        JSON,
        Arg("person", type=a.owner, metavar="PERSON", help="the person leaving"),
        Arg(
            "--apply",
            action="store_true",
            help="act (asks first in a terminal; there is no --yes): disable their own keys, "
            "transfer what --transfer names, keep the rest, end their memberships",
        ),
        Arg(
            "--transfer",
            action="append",
            type=transfer_pair,
            default=[],
            metavar="FROM=TO",
            help="give FROM's keys (an owner, or OWNER/NAME for one key) to TO instead",
        ),
        Arg(
            "--reason",
            default="",
            type=a.reason,
            help="the disabled keys' reason (default: offboarded: …)",
        ),
        Arg(
            "--undo",
            nargs="?",
            const="",
            type=batch_id,
            metavar="BATCH",
            help="reverse their newest applied offboarding (or BATCH) whole, from the audit "
            "trail: keys enabled and moved back, memberships restored (asks first in a "
            "terminal); refused if a key changed since",
        ),
    ),
    examples=(
        "apikey-tui offboard alice                     # a dry run: what alice holds",
        "apikey-tui offboard alice --apply --transfer svc-billing=payments",
        "apikey-tui offboard alice --undo              # reverses that --apply",
    ),
)
