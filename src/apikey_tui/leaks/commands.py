"""The `scan` and `serve-leaks` subcommands: their options here, their work in this package."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

# Standard library only at import time: the CLI builds every parser for `--help` and usage
# errors, which must stay as cheap as starting Python.
from apikey_tui.command_output import EXIT_OK, EXIT_USAGE, emit
from apikey_tui.integrations.serve_options import add_server_options, count, server_options
from apikey_tui.names import printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli.py
if TYPE_CHECKING:
    from typing import Any, TextIO

    from apikey_tui.leaks.scan import Found, ScanError
    from apikey_tui.leaks.verdicts import Verdict
    from apikey_tui.store import KeyStore

EXIT_FOUND = 1  # a live key was found (scan, like grep's 'matched')
OpenStore = Callable[..., "KeyStore"]  # cli._open_store(url, create=...)


def add_commands(commands: Any, common: argparse.ArgumentParser) -> None:
    """Add `scan` and `serve-leaks` to the CLI's subcommands."""
    scan = commands.add_parser(
        "scan",
        parents=[common],
        help="find API keys in files, standard input or git history; exit 1 on a live one",
        description="Find well-formed API keys (shape and checksum) and, with a database, tell "
        "live keys from disabled, expired, deleted and forged ones. Never prints a secret. "
        "Exit 1: a live key was found (with --offline: any well-formed key), even if some "
        "part could not be read; 0: everything read, nothing live; 2: usage error, a part "
        "that could not be read (each named on stderr), or a database that cannot be asked.",
    )
    scan.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="files and directories (recursively; symlinks inside are not followed), pipes such "
        "as /dev/stdin, or - for standard input; with --git, the repository (default: .)",
    )
    scan.add_argument(
        "--git",
        action="store_true",
        help="every blob in the history of every ref, and every commit and tag message, not files",
    )
    scan.add_argument(
        "--disable",
        action="store_true",
        help="mark each genuine key found (live, disabled or expired) as leaked: disabled with "
        "the reason 'leaked: <where>' and a key.leak audit event; in a terminal it asks first",
    )
    scan.add_argument(
        "-y",
        "--yes",
        action="store_true",
        help="with --disable: do not ask first (a script is never asked)",
    )
    scan.add_argument(
        "--offline",
        action="store_true",
        help="no database: report every well-formed key (for pre-commit hooks)",
    )
    scan.set_defaults(run_leaks=run_scan)

    serve = commands.add_parser(
        "serve-leaks",
        parents=[common],
        help="take signed leak reports (GitHub, deps.dev) and revocations; stop leaked keys",
    )
    add_server_options(serve, port=9181)
    serve.add_argument(
        "--github-keys",
        required=True,
        metavar="FILE",
        help="a saved copy of https://api.github.com/meta/public_keys/secret_scanning",
    )
    serve.add_argument(
        "--depsdev-keys", metavar="FILE", help="deps.dev's public keys, same format (POST /depsdev)"
    )
    serve.add_argument(
        "--action",
        choices=["disable", "delete"],
        default="disable",
        help="what happens to a reported live key (default disable: reversible)",
    )
    serve.add_argument(
        "--on-leak",
        metavar="CMD",
        help="run CMD (split like a shell, no shell) with each leak as JSON on stdin; no key",
    )
    serve.add_argument(
        "--trusted-proxy",
        action="append",
        default=[],
        metavar="ADDR",
        help="a proxy (address or network) whose X-Forwarded-For names the client; repeatable",
    )
    serve.add_argument(
        "--revoke-per-minute",
        type=count,
        default=30,
        metavar="N",
        help="POST /revoke requests per client address and minute (default 30)",
    )
    serve.set_defaults(run_leaks=run_serve)


def run_scan(url: Callable[[], str], args: argparse.Namespace, open_store: OpenStore) -> int:
    """Scan, judge each distinct key once against the database, print, maybe disable."""
    from apikey_tui.leaks.scan import ScanError, scan_git, scan_paths, scan_stream

    paths: list[str] = args.paths or ["."]
    if args.offline and args.disable:
        return _usage("scan: --disable needs the database; it cannot go with --offline")
    if "-" in paths and (args.git or len(paths) > 1):
        return _usage("scan: - (standard input) goes alone, without --git")
    if args.git and len(paths) > 1:
        return _usage("scan --git takes one repository")
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
        store = open_store(url(), create=False)  # refused: 2, by the CLI (it checked nothing)
        try:
            code = _report(args, found, store)
        finally:
            store.close()
    if code == EXIT_OK and unreadable:
        return EXIT_USAGE  # fail closed: a file we could not read may hold a key
    return code


def _report(args: argparse.Namespace, found: list[Found], store: KeyStore | None) -> int:
    from apikey_tui.leaks.verdicts import judge, mask, token_sha256

    verdicts: dict[str, Verdict] = {}
    outcomes: dict[str, str] = {}
    rows: list[dict[str, Any]] = []
    first: dict[str, Found] = {}  # where each distinct key was first seen
    if store is not None:
        for place in found:
            digest = token_sha256(place.text)
            if digest not in verdicts:
                verdicts[digest], first[digest] = judge(store, place.key), place
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
        if keys and not outcomes:
            it = "it" if keys == 1 else "them"
            summary += f"; disable {it} with --disable, then recreate or rotate {it}"
    if summary:
        print(f"apikey-tui: {summary}.", file=sys.stderr)
    return EXIT_FOUND if live else EXIT_OK


def _disable_confirmed(
    args: argparse.Namespace, genuine: dict[str, Verdict], first: dict[str, Found]
) -> bool:
    """In a terminal, ask before marking the genuine keys found as leaked, first saying where
    each one was found, whose it is and its state (up to ten, then how many more): the findings
    on stdout come only after the answer."""
    from apikey_tui.leaks.verdicts import mask
    from apikey_tui.prompts import confirmed

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


def run_serve(url: Callable[[], str], args: argparse.Namespace, open_store: OpenStore) -> int:
    """Run serve-leaks under uvicorn until interrupted (needs the [leaks] extra)."""
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
    from apikey_tui.leaks.clients import parse_networks

    try:
        keys = {"github": reports.load_public_keys(args.github_keys)}
        if args.depsdev_keys:
            keys["depsdev"] = reports.load_public_keys(args.depsdev_keys)
        trusted = parse_networks(args.trusted_proxy)
        on_leak = shlex.split(args.on_leak) if args.on_leak is not None else None
        auth_server.protocol(args.http)  # --http httptools without httptools
    except ValueError as exc:  # a bad key file, address or command: refuse to start
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if on_leak == []:
        return _usage("serve-leaks: --on-leak needs a command")
    store = open_store(url(), create=False)
    app = server.LeaksApp(
        store,
        keys,
        delete=args.action == "delete",
        on_leak=on_leak,
        revoke_per_minute=args.revoke_per_minute,
        trusted_proxies=trusted,
    )
    auth_server.serve(app, **server_options(args))
    return EXIT_OK


def _usage(message: str) -> int:
    print(f"apikey-tui {message} (see --help)", file=sys.stderr)
    return EXIT_USAGE
