"""`scan` and `serve-leaks`: their records and handlers (the work is apikey_tui.leaks')."""

from __future__ import annotations

import sys

# Standard library only at import time: the CLI builds every parser for `--help` and usage
# errors, which must stay as cheap as starting Python.
from apikey_tui.cli import arguments as a
from apikey_tui.cli.output import EXIT_OK, EXIT_USAGE, emit, usage_error
from apikey_tui.cli.prompts import confirmed
from apikey_tui.cli.records import MUST_EXIST, Arg, Command
from apikey_tui.names import printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    import argparse
    from typing import Any, TextIO

    from apikey_tui.cli.records import Call
    from apikey_tui.leaks.scan import Found, ScanError
    from apikey_tui.leaks.verdicts import TokenVerdict
    from apikey_tui.store import KeyStore

EXIT_FOUND = 1  # a live key was found (scan, like grep's 'matched')


def run_scan(call: Call) -> int:
    """Scan, judge each distinct key once against the database, print, maybe disable."""
    args = call.args
    from apikey_tui.leaks.scan import ScanError, scan_git, scan_paths, scan_stream

    paths: list[str] = args.paths or ["."]
    if args.offline and args.disable:
        return usage_error("scan: --disable needs the database; it cannot go with --offline")
    if "-" in paths and (args.git or len(paths) > 1):
        return usage_error("scan: - (standard input) goes alone, without --git")
    if args.git and len(paths) > 1:
        return usage_error("scan --git takes one repository")
    unreadable: list[ScanError] = []

    def complain(error: ScanError) -> None:
        unreadable.append(error)
        print(f"apikey-tui: {printable(str(error))}", file=sys.stderr)

    try:
        if args.git:
            found = list(scan_git(paths[0], complain))
        elif paths == ["-"]:
            found = list(scan_stream(sys.stdin.buffer))
        else:
            found = list(scan_paths(paths, complain))
    except ScanError as exc:
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if args.offline:
        code = _report(args, found, None)
    else:
        # A database that cannot be asked is refused with 2 (the record): nothing was checked.
        code = _report(args, found, call.store())
    if code == EXIT_OK and unreadable:
        return EXIT_USAGE  # fail closed: a file we could not read may hold a key
    return code


def _report(args: argparse.Namespace, found: list[Found], store: KeyStore | None) -> int:
    from apikey_tui.leaks.verdicts import judge_all, mask, token_sha256

    verdicts: dict[str, TokenVerdict] = {}
    outcomes: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    first: dict[str, Found] = {}  # where each distinct key was first seen
    if store is not None:
        for place in found:
            first.setdefault(token_sha256(place.text), place)
        judged = judge_all(store, [place.key for place in first.values()])
        verdicts = dict(zip(first, judged, strict=True))
    # A leak marks the secret whatever the key's state (store.leaks): a disabled or expired
    # key found with its right secret is marked too, so no enable or new expiry revives it.
    genuine = [d for d, v in verdicts.items() if v.genuine]
    if (
        store is not None
        and args.disable
        and genuine
        and _disable_confirmed(args, {d: verdicts[d] for d in genuine}, first)
    ):
        for digest in genuine:
            credential = verdicts[digest].credential
            assert credential is not None
            leak = store.contain_leak(credential, source="scan", where=first[digest].where)
            outcomes[digest] = leak.outcome if leak is not None else "changed meanwhile"
    for place in found:
        digest = token_sha256(place.text)
        verdict = verdicts.get(digest)
        rows.append(
            {
                "where": place.where,
                "path": place.path,
                "line": place.line,
                "commit": place.commit,
                "tag": place.tag,
                "public_id": mask(place.key.public_id),
                "token_sha256": digest,
                "state": verdict.state if verdict is not None else "well-formed",
                "owner": verdict.owner if verdict is not None else None,
                "name": verdict.name if verdict is not None else None,
                "action": outcomes.get(digest),
            }
        )
    live = [row for row in rows if row["state"] in ("live", "well-formed")]

    def human(out: TextIO) -> None:
        for row in rows:
            print(_line(row), file=out)

    emit(args, rows, human)
    keys = len({row["token_sha256"] for row in live})
    some = "1 API key" if keys == 1 else f"{keys} API keys"
    if store is None:
        summary = f"{some} found (not checked against a database)" if keys else ""
    else:
        summary = f"{some.replace('API', 'live API')} found" if keys else ""
        it = "it" if keys == 1 else "them"
        if keys and not outcomes:
            summary += f"; disable {it} with --disable, then recreate or rotate {it}"
        elif keys:  # the next step: a new secret, then enable (a recreate keeps the disable)
            summary += f" and disabled; recreate or rotate {it}, then enable {it}"
    if summary:
        print(f"apikey-tui: {summary}.", file=sys.stderr)
    return EXIT_FOUND if live else EXIT_OK


def _disable_confirmed(
    args: argparse.Namespace, genuine: dict[str, TokenVerdict], first: dict[str, Found]
) -> bool:
    """In a terminal, ask before marking the genuine keys found as leaked, first saying where
    each one was found, whose it is and its state (up to ten, then how many more): the findings
    on stdout come only after the answer."""
    from apikey_tui.leaks.verdicts import mask

    lines = [
        f"  {printable(first[digest].where)}: {printable(v.owner or '?')}/"
        f"{printable(v.name or '?')} ({mask(first[digest].key.public_id)}, {v.state})"
        for digest, v in list(genuine.items())[:10]
    ]
    if len(genuine) > 10:
        lines.append(f"  and {len(genuine) - 10} more")
    one = len(genuine) == 1
    some = "1 key" if one else f"{len(genuine)} keys"
    it = "it" if one else "them"
    question = "\n".join([f"Found {some} of this database:", *lines, f"Disable {it} as leaked?"])
    if confirmed(question, assume_yes=args.yes):
        return True
    print("Cancelled: no key was disabled.", file=sys.stderr)
    return False


def _line(row: dict[str, Any]) -> str:
    where = printable(row["where"])
    if row["state"] == "well-formed":
        return f"{where}: API key {row['public_id']}"
    key = f"{row['public_id']}" + (
        f" ({printable(row['owner'])}/{printable(row['name'])})" if row["owner"] else ""
    )
    action = f", {row['action']}" if row["action"] else ""
    return f"{where}: {row['state']} key {key}{action}"


def run_serve(call: Call) -> int:
    """Run serve-leaks under uvicorn until interrupted (needs the [leaks] extra)."""
    args = call.args
    import shlex

    try:
        from apikey_tui.integrations import auth_server
        from apikey_tui.leaks import reports, server
    except ImportError:
        print(
            "apikey-tui: serve-leaks needs cryptography and uvicorn: "
            "pip install 'apikey-tui[leaks]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from apikey_tui.errors import (
        DatabaseCorruptError,
        DatabasePermissionError,
        InvalidInputError,
        StoreUnavailableError,
    )
    from apikey_tui.networks import TrustedProxies

    try:
        keys = {"github": reports.load_public_keys(args.github_keys)}
        if args.depsdev_keys:
            keys["depsdev"] = reports.load_public_keys(args.depsdev_keys)
        trusted = TrustedProxies(args.trusted_proxy)
        on_leak = shlex.split(args.on_leak) if args.on_leak is not None else None
        auth_server.protocol(args.http)  # --http httptools without httptools
    except (ValueError, InvalidInputError) as exc:  # a bad key file, address or command
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if on_leak == []:
        return usage_error("serve-leaks: --on-leak needs a command")
    store, delete = call.store(), args.action == "delete"
    # A role that may not stop a key (a verifier's grants) is told now, not by the first leak.
    # Anything else the check meets (a lock another session holds: the change log's, which any
    # role may take, or a long admin batch's) says nothing of the role, and each report meets
    # it anyway: it serves, and says so (it exited, leaving every report unanswered).
    try:
        store.check_containment(delete=delete)
    except (DatabasePermissionError, DatabaseCorruptError):
        raise
    except StoreUnavailableError as exc:
        print(
            f"apikey-tui: warning: serve-leaks could not check that its role may stop keys: "
            f"{printable(str(exc))}",
            file=sys.stderr,
        )
    app = server.LeaksApp(
        store,
        keys,
        delete=delete,
        on_leak=on_leak,
        revoke_per_minute=args.revoke_per_minute,
        trusted_proxies=trusted,
    )
    auth_server.serve(app, **a.server_options(args))
    return EXIT_OK


SCAN = Command(
    "scan",
    help="find API keys in files, standard input or git history; exit 1 on a live one",
    description="Find well-formed API keys (shape and checksum) and, with a database, tell "
    "live keys from disabled, expired, deleted and forged ones. Never prints a secret. "
    "Exit 1: a live key was found (with --offline: any well-formed key), even if some "
    "part could not be read; 0: everything read, nothing live; 2: usage error, a part "
    "that could not be read (each named on stderr), or a database that cannot be asked.",
    run=run_scan,
    database=MUST_EXIST,  # unless --offline: then it opens none
    refused_exit=EXIT_USAGE,  # exit 1 means "a live key was found": a refusal or a bug says 2
    bug_exit=EXIT_USAGE,
    arguments=(
        *a.COMMON,
        Arg(
            "paths",
            nargs="*",
            metavar="PATH",
            help="files and directories (recursively; symlinks inside are not followed), pipes "
            "such as /dev/stdin, or - for standard input; with --git, the repository "
            "(default: .)",
        ),
        Arg(
            "--git",
            action="store_true",
            help="every blob in the history of every ref, and every commit and tag message, "
            "not files",
        ),
        Arg(
            "--disable",
            action="store_true",
            help="mark each genuine key found (live, disabled or expired) as leaked: disabled "
            "with the reason 'leaked: <where>' and a key.leak audit event; in a terminal it asks "
            "first",
        ),
        Arg(
            "-y",
            "--yes",
            action="store_true",
            help="with --disable: do not ask first (a script is never asked)",
        ),
        Arg(
            "--offline",
            action="store_true",
            help="no database: report every well-formed key (for pre-commit hooks)",
        ),
    ),
    examples=(
        "apikey-tui scan src/",
        "git diff --cached | apikey-tui scan --offline -",
        "apikey-tui scan --git . --disable --yes",
    ),
)
SERVE_LEAKS = Command(
    "serve-leaks",
    help="take signed leak reports (GitHub, deps.dev) and revocations; stop leaked keys",
    run=run_serve,
    database=MUST_EXIST,
    refused_exit=EXIT_USAGE,  # a key file, URL or database it cannot use: it does not start
    arguments=(
        *a.COMMON,
        *a.server(port=9181),
        Arg(
            "--github-keys",
            required=True,
            metavar="FILE",
            help="a saved copy of https://api.github.com/meta/public_keys/secret_scanning",
        ),
        Arg(
            "--depsdev-keys",
            metavar="FILE",
            help="deps.dev's public keys, same format (POST /depsdev)",
        ),
        Arg(
            "--action",
            choices=["disable", "delete"],
            default="disable",
            help="what happens to a reported live key (default disable: reversible)",
        ),
        Arg(
            "--on-leak",
            metavar="CMD",
            help="run CMD (split like a shell, no shell) with each leak as JSON on stdin; no key",
        ),
        Arg(
            "--trusted-proxy",
            action="append",
            default=[],
            metavar="ADDR",
            help="a proxy (address or network) whose X-Forwarded-For names the client; repeatable",
        ),
        Arg(
            "--revoke-per-minute",
            type=a.count,
            default=30,
            metavar="N",
            help="POST /revoke requests per client address and minute (default 30)",
        ),
    ),
    examples=("apikey-tui serve-leaks --github-keys github-keys.json --port 9181",),
)
