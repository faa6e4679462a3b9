"""`keys list` and `keys show`, and keys as JSON and as tables (other commands print them too)."""

from __future__ import annotations

import argparse
import sys

from apikey_tui.cli import arguments as a
from apikey_tui.cli.output import emit
from apikey_tui.cli.records import MUST_EXIST, Arg, Command
from apikey_tui.names import counted, format_moment, printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import datetime
    from typing import Any, TextIO

    from apikey_tui.cli.records import Call
    from apikey_tui.networks import NetworkRules
    from apikey_tui.store import KeyInfo
    from apikey_tui.store.limit_use import LimitUse, LimitUses
    from apikey_tui.store.network_use import NetworkUse


EMPTY_HINT = "No keys. Create one with: apikey-tui keys create NAME --scope SCOPE"


def list_keys(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    everyone = getattr(args, "all", False)
    keys = store.list_keys(
        None if everyone else owner,
        args.filter,
        limit=None if args.limit is None else args.limit + 1,  # one more: are there more?
        expiring_within=args.expiring,
        unused_for=args.unused,
        violating_policy=args.violating_policy,
    )
    more = args.limit is not None and len(keys) > args.limit
    keys = keys[: args.limit] if more else keys
    if args.violating_policy and store.lifetime_policy() is None:
        print("No max-lifetime policy is set, so no key breaks it.", file=sys.stderr)
    # For cron: a filtered listing that finds nothing prints nothing (cron mails only output).
    quiet = args.expiring is not None or args.unused is not None or args.violating_policy
    now = store.clock()

    def human(out: TextIO) -> None:
        if not keys and args.filter and not quiet:
            # Keys exist maybe, none match: say so on stderr, not "create one" on stdout. repr
            # alone escapes control and format characters; printable() first doubled them.
            print(f"No keys match {args.filter!r}.", file=sys.stderr)
        elif keys or not quiet:
            print_keys(keys, out, with_owner=everyone, now=now)

    done = emit(args, [key_json(k, now) for k in keys], human)
    if more:  # after the table (stdout is flushed): in a terminal it reads as a footnote
        print(f"Showing the first {counted(args.limit)}; more match.", file=sys.stderr)
    return done


def show(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    info = store.get_key(owner, args.name)
    now = store.clock()
    pool = store.owner_limits(info.owner)
    uses = limit_use(store.limit_use(info))
    fence = store.owner_networks(info.owner)
    seen = store.network_use(info.owner, info.name)  # recent refusals, and would-be ones
    data = {
        **key_json(info, now),
        "owner_limits": [str(x) for x in pool],
        "limit_use": uses,
        "owner_networks": None if fence is None else fence.to_json(),
        "network_refusals": [r.to_json() for r in seen.refusals],
    }
    lines = network_lines(info.networks, seen, fence)
    return emit(args, data, lambda out: _print_key(info, out, now=now, uses=uses, nets=lines))


def owner_show(call: Call) -> int:
    store, args = call.store(), call.args
    from apikey_tui.names import check_owner

    owner = check_owner(args.owner_name)
    info = store.get_owner(owner)
    uses = limit_use(store.owner_limit_use(owner))
    fence = store.owner_networks(owner)
    data = {**info.to_json(), "owner": owner, "limit_use": uses,
            "networks": None if fence is None else fence.to_json()}  # fmt: skip
    words = {"team": "members: ", "service": "people:  "}

    def human(out: TextIO) -> None:
        print(f"owner:    {printable(owner)} ({counted(info.keys, 'key')})", file=out)
        print(f"kind:     {info.kind}", file=out)
        if info.kind in words:
            print(f"{words[info.kind]} {' '.join(info.members) or 'nobody'}", file=out)
        if info.member_of:
            print(f"in:       {' '.join(info.member_of)}", file=out)
        if info.description:
            print(f"about:    {printable(info.description)}", file=out)
        if info.meta:
            meta = " ".join(f"{k}={v}" for k, v in info.meta)
            print(f"meta:     {printable(meta)}", file=out)
        for line in _use_lines(uses) or ["none"]:
            print(f"limits:   {line}", file=out)
        print(f"networks: {fence.summary() if fence is not None else 'anywhere'}", file=out)

    return emit(args, data, human)


def limit_use(read: LimitUses) -> list[dict[str, Any]]:
    """Each limit with its use in the current window (`KeyStore.limit_use`) as JSON; used is
    None when the store of counts cannot say (one line on stderr: the rest is still shown)."""
    if read.unknown:
        print(f"apikey-tui: limits' use unknown: {read.unknown}", file=sys.stderr)
    return [use_json(use) for use in read.uses]


def use_json(use: LimitUse) -> dict[str, Any]:
    """One limit and its use in the current window, as `keys show --json` gives it."""
    return {
        "limit": str(use.limit),
        "of": use.of,
        "count": use.limit.count,
        "window_seconds": use.limit.seconds,
        "used": use.used,
        "window_ends": None if use.window_ends is None else use.window_ends.isoformat(),
    }


def network_lines(
    rules: NetworkRules | None, use: NetworkUse, owner: NetworkRules | None = None
) -> list[str]:
    """The key's rules, its owner's, and its recent refusals (and would-be ones), a line each."""
    lines = [rules.summary() if rules is not None else "anywhere"]
    if owner is not None:
        lines.append(f"and the owner's: {owner.summary()}")
    for refusal in use.refusals:
        what = "would refuse" if refusal.shadow else "refused"
        lines.append(
            f"{what} {refusal.requests} from {refusal.network} to {refusal.route or '-'}, "
            f"last {when(refusal.last)}"
        )
    return lines


def _use_lines(uses: list[dict[str, Any]]) -> list[str]:
    """'600/m (key): 12 used, window ends 2030-01-01 12:01 UTC' per limit."""
    return [use_line(use) for use in uses]


def use_line(use: dict[str, Any], *, share: bool = False) -> str:
    """'600/m (key): 12 used, window ends 2030-01-01 12:01 UTC' of one `use_json`; with
    share, the share of the limit too, rounded down: '512 used (85 %)'."""
    whose = "key" if use["of"] == "key" else "owner's pool"
    used = "use unknown" if use["used"] is None else f"{use['used']} used"
    if share and use["used"] is not None:
        used += f" ({use['used'] * 100 // use['count']} %)"
    end = use["window_ends"]
    ends = f", window ends {end[:19].replace('T', ' ')} UTC" if end else ""
    return f"{use['limit']} ({whose}): {used}{ends}"


def _print_key(
    info: KeyInfo,
    out: TextIO,
    *,
    now: datetime,
    uses: list[dict[str, Any]] | None = None,
    nets: list[str] | None = None,
) -> None:
    from apikey_tui.store.states import marker

    state = marker(info, now)[0]
    if info.disabled:
        state += f" since {when(info.disabled_at)}"
        state += f": {info.disabled_reason}" if info.disabled_reason else ""
    rows = [
        ["owner", info.owner],
        ["name", info.name],
        ["public id", info.public_id],
        ["scopes", ", ".join(info.scopes)],
        ["state", state],
        ["expires", when(info.expires_at) if info.expires_at else "never"],
        ["created", when(info.created_at)],
        ["last used", when(info.last_used_at) if info.last_used_at else "never"],
        ["made by", info.created_by or "unknown"],
    ]
    if info.meta:
        rows.append(["meta", " ".join(f"{k}={v}" for k, v in info.meta)])
    if info.tags:
        rows.append(["tags", " ".join(f"{k}={v}" for k, v in info.tags)])
    if info.grace_until is not None:
        rows.append(
            ["old secret", f"id {info.old_public_id}, works until {when(info.grace_until)}"]
        )
    if uses is not None:
        rows.extend(["limits" if i == 0 else "", line] for i, line in
                    enumerate(_use_lines(uses) or ["none"]))  # fmt: skip
    if nets is not None:
        rows.extend(["networks" if i == 0 else "", line] for i, line in enumerate(nets))
    rows = [[f"{label}:" if label else "", printable(value)] for label, value in rows]
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}", file=out)


def when(moment: datetime | None) -> str:
    return format_moment(moment) if moment is not None else "-"


def key_json(info: KeyInfo, now: datetime) -> dict[str, Any]:
    """A key as JSON: its fields, and its state's kind (store.states: the app's vocabulary)."""
    from apikey_tui.store.states import marker

    return {**info.to_json(), "state": marker(info, now)[1]}


def print_keys(keys: list[KeyInfo], out: TextIO, *, with_owner: bool, now: datetime) -> None:
    """Keys as a table: piped, plain columns of whole cells; in a terminal, sized to its width,
    cut as the app cuts, the state coloured. No keys: a hint on stderr, nothing on stdout."""
    from apikey_tui.cli import terminal_table as table
    from apikey_tui.names import FAIR_WIDTHS, look_alikes, shorten
    from apikey_tui.store.states import marker

    if not keys:
        print(EMPTY_HINT, file=sys.stderr)  # stdout holds only data: `| wc -l` counts 0
        return
    markers = [marker(k, now) for k in keys]

    def minute(moment: datetime | None, none: str) -> str:
        return moment.strftime("%Y-%m-%d %H:%M") if moment is not None else none

    def cut_apart(texts: list[str]) -> Callable[[str, int], str]:
        # both ends, and where a name differs from its look-alikes (the app's rule)
        apart = look_alikes(texts)
        return lambda text, width: shorten(text, width, apart.get(text))

    columns = [
        # A column is dropped before a name goes below 16 or the scopes below their fair width.
        table.Column("NAME", 12, cut_apart([printable(k.name) for k in keys]), fair=16),
        table.Column("PUBLIC ID", 9),
        # a fair share before names give up room: 'project serving' whole, not 'proje…'
        table.Column("SCOPES", 6, fair=FAIR_WIDTHS["scopes"]),
        table.Column("STATE", 10),  # never cut (≤ 10 cells), as the app never cuts it
        table.Column("EXPIRES (UTC)", 16),
        table.Column("CREATED (UTC)", 16),
        table.Column("LAST USED (UTC)", 16),
    ]
    rows = [
        [
            printable(k.name),
            k.public_id,
            printable(",".join(k.scopes)),
            text,
            minute(k.expires_at, "never"),
            minute(k.created_at, "-"),
            minute(k.last_used_at, "-"),
        ]
        for k, (text, _) in zip(keys, markers, strict=True)
    ]
    if with_owner:
        owners = cut_apart([printable(k.owner) for k in keys])
        columns.insert(0, table.Column("OWNER", 8, owners))
        for row, key in zip(rows, keys, strict=True):
            row.insert(0, printable(key.owner))
    room = table.terminal_width(out)
    if room is None:  # piped: whole cells, as scripts have always read them
        print_rows([c.header for c in columns], rows, out)
        return
    at = {c.header: i for i, c in enumerate(columns)}
    # Cut first what tells keys apart least; then drop whole columns, least needed first. The
    # state is what a glance is for: it is never cut ('⚠ 20h le…' said less than a column less).
    shrink = [at[h] for h in ("SCOPES", "PUBLIC ID", "OWNER", "NAME") if h in at]
    drop = [at[h] for h in ("CREATED (UTC)", "LAST USED (UTC)", "SCOPES", "PUBLIC ID")]
    colours = None
    if table.colour_wanted(out):
        colours = [table.STATE_COLOURS.get(kind) for _, kind in markers]
    table.render(
        columns,
        rows,
        out,
        room=room,
        shrink=shrink,
        drop=drop,
        colours=colours,
        colour_column=at["STATE"],
    )


def print_rows(header: list[str], rows: list[list[str]], out: TextIO) -> None:
    # Database content is printed with control and format characters escaped (JSON escapes its
    # own): an owner, actor or detail must never move the cursor or recolour the terminal.
    rows = [[printable(cell) for cell in row] for row in rows]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip(), file=out)


LIST = Command(
    "keys list",
    help="list keys (no secrets)",
    run=list_keys,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        Arg("--all", action="store_true", default=argparse.SUPPRESS, help="every owner's keys"),
        Arg(
            "--filter",
            default="",
            type=a.filter_text,
            metavar="TEXT",
            help="only keys matching TEXT, as the app's /: terms tag:env=prod (tag:env: any "
            "value), owner:NAME, kind:person|team|service, state:WORD, scope:NAME (each field "
            "must hold; one field's terms are alternatives), and free text found in an owner, "
            "name, id, scope's name, or a state named from 3 letters on: active, unused, "
            "soon/expiring, grace, disabled, expired, leaked",
        ),
        Arg(
            "--expiring",
            type=a.duration,
            metavar="DURATION",
            help="only keys that expire within this span (not those already expired), e.g. 14d",
        ),
        Arg(
            "--unused",
            type=a.duration,
            metavar="DURATION",
            help="only keys not used for this long (never used: since created or rotated), "
            "e.g. 90d",
        ),
        Arg(
            "--violating-policy",
            action="store_true",
            help="only keys whose lifetime breaks the max-lifetime policy",
        ),
        Arg(
            "--limit",
            type=a.limit,
            metavar="N",
            help=f"at most N keys (1-{a.LIMIT_MAX}); a note on stderr says when more match",
        ),
    ),
    examples=(
        "apikey-tui keys list",
        "apikey-tui keys list --all --expiring 14d      # for cron: silent when none",
        "apikey-tui keys list --filter prod --limit 20",
        "apikey-tui keys list --json | jq -r '.[] | select(.state != \"active\") | .name'",
    ),
)

SHOW = Command(
    "keys show",
    help="show one key",
    run=show,
    database=MUST_EXIST,
    arguments=(*a.COMMON, a.NAME),
    examples=("apikey-tui keys show ci", "apikey-tui keys show ci --owner svc-batch --json"),
)

OWNER_SHOW = Command(
    "owners show",
    help="show an owner: kind, members, metadata, limits and their use now",
    run=owner_show,
    database=MUST_EXIST,
    arguments=(
        *a.DATABASE,
        Arg("--json", action="store_true", default=argparse.SUPPRESS, help="JSON out"),
        Arg("owner_name", metavar="OWNER", type=a.owner, help="the owner"),
    ),
    examples=("apikey-tui owners show svc-batch", "apikey-tui owners show svc-batch --json"),
)
