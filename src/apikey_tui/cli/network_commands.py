"""The commands of where keys may be used from: set-networks, networks (--propose, --apply)."""

from __future__ import annotations

import argparse
import sys

from apikey_tui.cli import arguments as a
from apikey_tui.cli.key_listing import key_json, network_lines
from apikey_tui.cli.output import emit, usage_error
from apikey_tui.cli.records import MUST_EXIST, Arg, Command
from apikey_tui.names import printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from typing import TextIO

    from apikey_tui.cli.records import Call
    from apikey_tui.networks import NetworkRules


def rules_given(
    args: argparse.Namespace, current: NetworkRules | None, mode_flag: str
) -> tuple[NetworkRules | None, str | None]:
    """The rules a command's options ask for: `none` lifts them, networks replace them, a mode
    alone changes the mode of the rules there are. Returns (rules, problem)."""
    from apikey_tui.networks import ENFORCE, network_rules

    mode = args.mode
    if args.none is not None:
        if args.allow_from or args.deny_from or mode is not None:
            return None, "give networks, or none alone"
        return None, None
    if args.allow_from or args.deny_from:
        return network_rules(args.allow_from, args.deny_from, mode or ENFORCE), None
    if mode is not None:
        if current is None or not current.readable:
            return None, f"{mode_flag} needs networks: there are none to switch"
        return current.with_mode(mode), None
    return None, "give --allow-from, --deny-from, --mode, or none"


def _words(rules: NetworkRules | None) -> str:
    return "anywhere" if rules is None else rules.summary()


def _may_now(rules: NetworkRules | None) -> str:
    """What the rules now let a key do, as a sentence's verb: shadow rules refuse nothing, so
    "may now be used from shadow: allow …" would misread."""
    from apikey_tui.networks import SHADOW

    if rules is None or not rules.readable:
        return f"may now be used from {_words(rules)}"
    which = rules.summary().removeprefix(f"{rules.mode}: ")
    if rules.mode == SHADOW:
        return f"may still be used from anywhere: shadow mode only logs what {which} would refuse"
    return f"may now be used only as the rules say ({which})"


def set_networks(call: Call) -> int:
    store, args, owner = call.store(), call.args, call.owner
    old = store.get_key(owner, args.name)
    rules, problem = rules_given(args, old.networks, "--mode")
    if problem is not None:
        return usage_error(f"keys set-networks: {problem}")
    info = store.set_networks_of_keys([old], rules).after[0]
    print(
        f"Key {info.name!r} of {printable(info.owner)} {_may_now(info.networks)} "
        f"(was {_words(old.networks)}).",
        file=sys.stderr,
    )
    return emit(args, key_json(info, store.clock()), lambda out: None)


def set_owner_networks(call: Call) -> int:
    store, args = call.store(), call.args
    rules, problem = rules_given(args, store.owner_networks(args.owner_name), "--mode")
    if problem is not None:
        return usage_error(f"owners set-networks: {problem}")
    done = store.set_owner_networks(args.owner_name, rules)
    print(
        f"Every key of {printable(done.owner)} {_may_now(done.after)} "
        f"(was {_words(done.before)}), besides its own rules.",
        file=sys.stderr,
    )
    data = {
        "owner": done.owner,
        "networks": None if done.after is None else done.after.to_json(),
        "were": None if done.before is None else done.before.to_json(),
    }
    return emit(args, data, lambda out: None)


def networks(call: Call) -> int:
    """Where a key was used from, its refusals, and the proposal (--propose; --apply sets it)."""
    from apikey_tui.store.network_use import proposed_rules

    store, args, owner = call.store(), call.args, call.owner
    info = store.get_key(owner, args.name)
    use = store.network_use(owner, args.name, args.days)
    if args.apply:
        rules = proposed_rules(use)  # nothing recorded: one line, exit 1
        info = store.set_networks_of_keys([info], rules).after[0]
        print(
            f"Key {info.name!r} of {printable(info.owner)} now has the proposal in shadow "
            f"mode: {_words(info.networks)}. Requests from elsewhere pass and are recorded; "
            f"enforce with: apikey-tui keys set-networks {printable(info.name)} "
            f"--owner {printable(info.owner)} --mode enforce",
            file=sys.stderr,
        )
    if use.more:
        print(
            "apikey-tui: the key was used from more networks than verifiers record; the "
            "proposal covers only the recorded ones",
            file=sys.stderr,
        )
    data = {**use.to_json(), "networks": None if info.networks is None else info.networks.to_json()}

    def human(out: TextIO) -> None:
        if args.propose or args.apply:
            for cidr in use.proposal:  # one network a line: scriptable
                print(cidr, file=out)
            if not use.proposal:
                print(f"No use recorded in the last {args.days} days.", file=sys.stderr)
            return
        for line in network_lines(info.networks, use) or ["none"]:
            print(line, file=out)

    return emit(args, data, human)


SET_NETWORKS = Command(
    "keys set-networks",
    help="replace where a key may be used from (networks and mode, or none)",
    run=set_networks,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("none", nargs="?", choices=("none",), help="none: from anywhere"),
        a.ALLOW_FROM,
        a.DENY_FROM,
        a.networks_mode("--mode"),
    ),
    examples=(
        "apikey-tui keys set-networks partner --allow-from 203.0.113.0/24 --mode shadow",
        "apikey-tui keys set-networks partner --mode enforce    # keep the networks",
        "apikey-tui keys set-networks partner none              # from anywhere",
    ),
)

OWNER_SET_NETWORKS = Command(
    "owners set-networks",
    help="replace an owner's networks: every key of it must pass them too",
    run=set_owner_networks,
    database=MUST_EXIST,
    arguments=(
        *a.DATABASE,
        Arg("--json", action="store_true", default=argparse.SUPPRESS, help="JSON out"),
        Arg("owner_name", metavar="OWNER", type=a.owner, help="the owner whose keys inherit them"),
        Arg("none", nargs="?", choices=("none",), help="none: lift them"),
        a.ALLOW_FROM,
        a.DENY_FROM,
        a.networks_mode("--mode"),
    ),
    examples=("apikey-tui owners set-networks svc-batch --allow-from 10.0.0.0/8",),
)

NETWORKS = Command(
    "keys networks",
    help="where a key was used from, its refusals, and the smallest list of networks for it",
    run=networks,
    database=MUST_EXIST,
    arguments=(
        *a.COMMON,
        a.NAME,
        Arg("--propose", action="store_true", help="print the proposal only, one network a line"),
        Arg("--apply", action="store_true", help="set the proposal, in shadow mode (audited)"),
        Arg(
            "--days",
            type=a.count,
            default=30,
            metavar="N",
            help="the use of the last N days (default 30)",
        ),
    ),
    examples=(
        "apikey-tui keys networks partner --propose --days 14",
        "apikey-tui keys networks partner --propose --apply",
    ),
)
