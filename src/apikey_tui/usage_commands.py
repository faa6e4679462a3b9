"""`keys usage`, `keys rightsize` and `db compact`: their options here, their work in the store."""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

# Standard library and the names module only at import time (the CLI builds every parser).
from apikey_tui.command_output import EXIT_REFUSED, emit
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import counted, format_duration, parse_duration, printable
from apikey_tui.sparklines import sparkline

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli.py
if TYPE_CHECKING:
    from typing import Any, TextIO

    from apikey_tui.store import KeyInfo, KeyStore
    from apikey_tui.store.rightsizing import Rightsizing
    from apikey_tui.store.usage import KeyUsage


def _span(text: str) -> timedelta:
    try:
        span = parse_duration(text)
    except InvalidInputError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if span <= timedelta(0):
        raise argparse.ArgumentTypeError(f"expected a span longer than 0, got {text[:30]!a}")
    return span


def add_commands(keys: Any, db: Any, common: argparse.ArgumentParser) -> None:
    """Add `keys usage`, `keys rightsize` and `db compact` to the CLI's subcommands."""
    usage = keys.add_parser(
        "usage",
        parents=[common],
        help="a key's use per scope, its 403s and wrong secrets, requests per day",
        description="What verifiers recorded for the key in the window: requests per scope and "
        "last use, 403s with the missing scopes, wrong secrets, and requests per day.",
    )
    usage.add_argument("name")
    usage.add_argument(
        "--since",
        type=_span,
        default=timedelta(days=30),
        metavar="SPAN",
        help="the window, back from today's UTC midnight less SPAN (default 30d)",
    )
    usage.set_defaults(run=run_usage)

    rightsize = keys.add_parser(
        "rightsize",
        parents=[common],
        help="propose dropping scopes keys never used; --apply narrows them",
        description="For every key older than the window, propose dropping the scopes it never "
        "used in it (a key keeps at least one scope: a key unused altogether gets no proposal), "
        "and name the keys refused for a missing scope. Prints nothing when there is nothing to "
        "say (for cron).",
    )
    rightsize.add_argument("name", nargs="?", help="one key (default: every key of --owner)")
    rightsize.add_argument(
        "--all", action="store_true", dest="all_owners", help="every owner's keys"
    )
    rightsize.add_argument(
        "--window",
        type=_span,
        default=timedelta(days=30),
        metavar="SPAN",
        help="how far back to look for use (default 30d); younger keys get no proposal",
    )
    rightsize.add_argument(
        "--apply", action="store_true", help="narrow the keys (asks first in a terminal)"
    )
    rightsize.add_argument(
        "--yes", action="store_true", help="with --apply: do not ask for confirmation"
    )
    rightsize.set_defaults(run=run_rightsize)

    compact = db.add_parser(
        "compact",
        parents=[common],
        help="roll old usage minutes into hours and days; delete usage past the retention",
        description="Minutes older than 48 h become hours, hours older than 30 d become days, "
        "rows older than the retention go. One transaction: safe under cron, beside running "
        "verifiers and against kill -9. Prints nothing unless it changed something.",
    )
    compact.add_argument(
        "--retention",
        type=_span,
        default=timedelta(days=400),
        metavar="SPAN",
        help="how long usage is kept (default 400d)",
    )
    compact.set_defaults(run_db=run_compact)


def run_usage(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    """`keys usage NAME`: the key's use in the window."""
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


def run_rightsize(store: KeyStore, args: argparse.Namespace, owner: str) -> int:
    """`keys rightsize`: propose (and with --apply make) narrower keys."""
    if args.all_owners and args.name is not None:
        raise InvalidInputError("give a key NAME or --all, not both")
    who = None if args.all_owners else owner
    found = store.rightsize(args.window, owner=who, name=args.name)
    applied = False
    if args.apply and found.proposals:
        from apikey_tui.prompts import confirmed

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


def run_compact(url: str, args: argparse.Namespace) -> int:
    """`db compact`: one compaction of the usage table."""
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
