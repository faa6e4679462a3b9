"""`keys usage`, `keys rightsize`, `keys near-limits`, `db compact`: records and handlers (the
store does the work)."""

from __future__ import annotations

import sys
from datetime import timedelta

# Standard library and the names module only at import time (the CLI builds every parser).
from apikey_tui.cli import arguments as a
from apikey_tui.cli.output import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, emit
from apikey_tui.cli.prompts import confirmed
from apikey_tui.cli.records import MUST_EXIST, Arg, Command
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import counted, format_duration, printable
from apikey_tui.sparklines import sparkline

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import Any, TextIO

    from apikey_tui.cli.records import Call
    from apikey_tui.store import KeyInfo
    from apikey_tui.store.limit_use import NearLimit
    from apikey_tui.store.rightsizing import Rightsizing
    from apikey_tui.store.usage import KeyUsage


def run_usage(call: Call) -> int:
    """`keys usage NAME`: the key's use in the window."""
    store, args, owner = call.store(), call.args, call.owner
    report = store.key_usage(owner, args.name, args.since)
    return emit(args, report.to_json(), lambda out: _print_usage(report, out))


def _print_usage(report: KeyUsage, out: TextIO) -> None:
    # Every text here may hold anything: a scope a service asked for is recorded as it asked,
    # and a row may predate the rules. Escaped (printable), never obeyed by the terminal.
    info = report.info
    since = report.since.strftime("%Y-%m-%d")
    print(f"{_who(info)}: {report.requests} requests since {since} (UTC)", file=out)
    scopes = [printable(s.scope) for s in report.scopes]
    width = max([len("SCOPE"), *map(len, scopes)])
    print(f"{'SCOPE'.ljust(width)}  {'REQUESTS':>10}  LAST USED (UTC)", file=out)
    for scope, use in zip(scopes, report.scopes, strict=True):
        last = use.last_used.strftime("%Y-%m-%d %H:%M") if use.last_used else "never"
        print(f"{scope.ljust(width)}  {use.requests:>10}  {last}", file=out)
    for refused in report.forbidden:
        missing = printable(" ".join(refused.missing))
        print(f"403 missing {missing}: {refused.requests}", file=out)
    for policy, requests in report.limited:  # the limit's policy text, as a service recorded it
        print(f"429 limit {printable(policy)}: {requests}", file=out)
    print(f"wrong secrets: {report.wrong_secret}", file=out)
    for old in report.old_secrets:  # the evidence of a replaced (perhaps leaked) secret
        replaced = old.replaced_at.strftime("%Y-%m-%d %H:%M") if old.replaced_at else ""
        print(
            f"old secret {printable(old.public_id)} (replaced {replaced} UTC): "
            f"{old.requests} requests, {old.forbidden} refused (403), "
            f"{old.wrong_secret} wrong secrets",
            file=out,
        )
    days = [p.allowed for p in report.daily]
    print(f"per day: {sparkline(days)}  (max {max(days, default=0)})", file=out)


def _who(info: KeyInfo) -> str:
    """'owner/name (public id)', each part escaped for a terminal."""
    return f"{printable(info.owner)}/{printable(info.name)} ({printable(info.public_id)})"


def _scopes(scopes: tuple[str, ...]) -> str:
    return printable(" ".join(scopes))


def run_rightsize(call: Call) -> int:
    """`keys rightsize`: propose (and with --apply make) narrower keys."""
    args = call.args
    if args.all_owners and args.name is not None:
        raise InvalidInputError("give a key NAME or --all, not both")
    store = call.store()
    who = None if args.all_owners else call.owner
    found = store.rightsize(args.window, owner=who, name=args.name)
    applied = False
    if args.apply and found.proposals:
        names = ", ".join(
            f"{printable(p.info.owner)}/{printable(p.info.name)} (drop {_scopes(p.drop)})"
            for p in found.proposals
        )
        if not confirmed(f"Narrow {counted(len(found.proposals))}: {names}?", assume_yes=args.yes):
            print("Cancelled: nothing was done.", file=sys.stderr)  # the CLI's one wording
            return EXIT_REFUSED
        for proposal in found.proposals:
            store.apply_proposal(proposal, args.window)
        applied = True
    data = {
        "proposals": [p.to_json() for p in found.proposals],
        "refused": [r.to_json() for r in found.refused],
        "applied": applied,
    }
    return emit(args, data, lambda out: _print_rightsize(found, args.window, applied, out))


def _print_rightsize(found: Rightsizing, window: timedelta, applied: bool, out: TextIO) -> None:
    span = format_duration(window)
    for p in found.proposals:
        verb = "dropped" if applied else "drop"
        print(
            f"{_who(p.info)}: {verb} {_scopes(p.drop)} (unused for {span}; would have refused "
            f"{p.would_refuse}), keep {_scopes(p.keep)}",
            file=out,
        )
    for r in found.refused:
        gaps = "; ".join(f"{' '.join(m.missing)} ({m.requests})" for m in r.missing)
        print(f"{_who(r.info)}: refused for missing scopes: {printable(gaps)}", file=out)


EXIT_NEAR = 1  # a key or pool is at the threshold or above (scan's 'found' is 1 too)


def run_near_limits(call: Call) -> int:
    """`keys near-limits`: keys and owners' pools at --threshold % of a limit or more now;
    exit 1 when there is one, 2 when the store of counts could not say (fail closed)."""
    args = call.args
    who = None if args.all_owners else call.owner
    store = call.store()
    found = store.near_limits(owner=who, share=args.threshold / 100, most=None)
    near = [_near_json(n) for n in found.near]
    data = {"threshold": args.threshold, "near": near, "unknown": found.unknown or None}
    if found.unknown:
        print(f"apikey-tui: limits' use unknown: {found.unknown}", file=sys.stderr)

    def human(out: TextIO) -> None:  # nothing when none is near: cron mails only output
        from apikey_tui.cli.key_listing import use_line

        for item, n in zip(near, found.near, strict=True):
            print(f"{_near_who(n)}: {use_line(item, share=True)}", file=out)

    emit(args, data, human)
    if near:
        return EXIT_NEAR
    return EXIT_USAGE if found.unknown else EXIT_OK


def _near_json(near: NearLimit) -> dict[str, Any]:
    from apikey_tui.cli.key_listing import use_json

    return {"owner": near.owner, "name": near.name, **use_json(near.use)}


def _near_who(near: NearLimit) -> str:
    """'owner/name', or 'owner (pool)' for an owner's shared limits, escaped for a terminal."""
    if near.name is None:
        return f"{printable(near.owner)} (pool)"
    return f"{printable(near.owner)}/{printable(near.name)}"


def run_compact(call: Call) -> int:
    """`db compact`: one compaction of the usage table (no store: it checks the schema only)."""
    url, args = call.url(), call.args
    from apikey_tui.db import ensure_schema, make_engine
    from apikey_tui.store import KeyStore

    engine = make_engine(url, create=False)
    try:
        ensure_schema(engine, create=False)
        done = KeyStore(engine).compact_usage(args.retention)
    finally:
        engine.dispose()
    data = {
        "into_hours": done.into_hours,
        "into_days": done.into_days,
        "expired": done.expired,
        "retention": format_duration(args.retention),
    }

    def human(out: TextIO) -> None:
        if done.into_hours or done.into_days or done.expired:  # silent when nothing was due
            print(
                f"Compacted usage: {done.into_hours} minute rows into hours, {done.into_days} "
                f"into days; {done.expired} rows past {data['retention']} deleted.",
                file=out,
            )

    return emit(args, data, human)


USAGE = Command(
    "keys usage",
    help="a key's use per scope, its 403s and wrong secrets, requests per day",
    description="What verifiers recorded for the key in the window: requests per scope and "
    "last use, 403s with the missing scopes, wrong secrets, and requests per day.",
    run=run_usage,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg(
            "--since",
            type=a.span,
            default=timedelta(days=30),
            metavar="SPAN",
            help="the window, back from today's UTC midnight less SPAN (default 30d)",
        ),
    ),
    examples=("apikey-tui keys usage ci --since 7d", "apikey-tui keys usage ci --json"),
)
RIGHTSIZE = Command(
    "keys rightsize",
    help="propose dropping scopes keys never used; --apply narrows them",
    description="For every key older than the window, propose dropping the scopes it never "
    "used in it (a key keeps at least one scope: a key unused altogether gets no proposal), "
    "and name the keys refused for a missing scope. Prints nothing when there is nothing to "
    "say (for cron).",
    run=run_rightsize,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        Arg("name", nargs="?", help="one key (default: every key of --owner)"),
        Arg("--all", action="store_true", dest="all_owners", help="every owner's keys"),
        Arg(
            "--window",
            type=a.span,
            default=timedelta(days=30),
            metavar="SPAN",
            help="how far back to look for use (default 30d); younger keys get no proposal",
        ),
        Arg("--apply", action="store_true", help="narrow the keys (asks first in a terminal)"),
        Arg("--yes", action="store_true", help="with --apply: do not ask for confirmation"),
    ),
    examples=(
        "apikey-tui keys rightsize --all              # for cron: silent when none",
        "apikey-tui keys rightsize ci --window 90d --apply   # asks first in a terminal",
        "apikey-tui keys rightsize --all --apply --yes --json",
    ),
)
NEAR_LIMITS = Command(
    "keys near-limits",
    help="keys and owners' pools near a limit now; exit 1 when any is (for cron, alerts)",
    description="Keys and owners' pools that have used --threshold % (default 80) or more of "
    "a limit in its current window, fullest first, read from the store of counts "
    "($APIKEY_TUI_LIMITS_URL, else the key database) as `keys show` reads it. Prints nothing "
    "when none is. Exit 0: none is near; 1: one or more are (listed); 2: usage error, a "
    "database that cannot be asked, or a store of counts that could not say (one line on "
    "stderr).",
    run=run_near_limits,
    database=MUST_EXIST,
    refused_exit=EXIT_USAGE,  # exit 1 means "one is near": a refusal or a bug says 2
    bug_exit=EXIT_USAGE,
    arguments=(
        *a.COMMON,
        Arg("--all", action="store_true", dest="all_owners", help="every owner's keys and pools"),
        Arg(
            "--threshold",
            type=a.percent,
            default=80,
            metavar="PERCENT",
            help="the share of a limit that counts as near, 1 to 100 (default 80)",
        ),
    ),
    examples=(
        "apikey-tui keys near-limits --all                 # for cron: silent when none",
        "apikey-tui keys near-limits --all --threshold 95 --json",
    ),
)
COMPACT = Command(
    "db compact",
    help="roll old usage minutes into hours and days; delete usage past the retention",
    description="Minutes older than 48 h become hours, hours older than 30 d become days, "
    "rows older than the retention go. One transaction: safe under cron, beside running "
    "verifiers and against kill -9. Prints nothing unless it changed something.",
    run=run_compact,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        Arg(
            "--retention",
            type=a.span,
            default=timedelta(days=400),
            metavar="SPAN",
            help="how long usage is kept (default 400d)",
        ),
    ),
    examples=("apikey-tui db compact                # hourly from cron: silent when idle",),
)
