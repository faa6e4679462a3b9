"""`serve-auth`: the forward-auth server that reverse proxies ask (needs the [serve] extra)."""

from __future__ import annotations

import functools
import sys

from apikey_tui.cli import arguments as a
from apikey_tui.cli.output import EXIT_OK, EXIT_USAGE
from apikey_tui.cli.records import VERIFIER, Arg, Command, Group
from apikey_tui.errors import InvalidInputError
from apikey_tui.names import printable

TYPE_CHECKING = False  # typing costs the CLI's `--help` 3 ms: see cli/entry.py
if TYPE_CHECKING:
    from apikey_tui.cli.records import Call


def run(call: Call) -> int:
    """Run the forward-auth app under uvicorn until interrupted (needs the [serve] extra)."""
    url, args = call.url(), call.args
    try:
        from apikey_tui.integrations import auth_server
    except ImportError:
        print(
            "apikey-tui: serve-auth needs uvicorn: pip install 'apikey-tui[serve]'",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from apikey_tui.config import parse_database_url
    from apikey_tui.integrations import forward_auth

    parse_database_url(url)  # a URL we cannot use is a usage error now, not a 503 per request
    options = {
        name: getattr(args, name)
        for name in ("revocation_bound", "check_timeout", "check_workers", "max_pending_checks")
        if getattr(args, name) is not None
    }
    # Limits: where they count, and what a failed store means (fail-open's processes default
    # to this host's workers: declare the whole deployment's with --limits-processes).
    if args.limits_url is not None:
        options["limits_url"] = args.limits_url
    if args.limits_fail is not None:
        options["limits_fail"] = args.limits_fail
    options["limits_processes"] = args.limits_processes or args.workers
    # Network rules: the proxies whose forwarding header names the client (else the
    # environment's, else none: the client is the proxy asking).
    if args.trusted_proxy:
        options["trusted_proxies"] = args.trusted_proxy
    if args.client_header is not None:
        options["client_header"] = args.client_header
    # One verifier per process: its cache and key index are per process. With --workers, each
    # worker (a new interpreter) builds its own app from `build`.
    build = functools.partial(forward_auth.create_app, url, args.rules, realm=args.realm, **options)
    try:
        auth_server.protocol(args.http)  # --http httptools without httptools
        app = build()  # a bad rules file or verifier option: refuse to start, not guess
    except (ValueError, InvalidInputError) as exc:
        print(f"apikey-tui: {printable(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    if args.workers == 1:
        auth_server.serve(app, **a.server_options(args))
    else:
        app.verifier.close()  # it only checked the settings
        auth_server.serve(build, workers=args.workers, **a.server_options(args))
    return EXIT_OK


COMMAND = Command(
    "serve-auth",
    help="answer reverse proxies' forward-auth requests (nginx, Caddy, Traefik, Envoy)",
    run=run,
    database=VERIFIER,
    # --database-url alone: it serves every owner's keys and prints no JSON.
    arguments=(
        *a.DATABASE,
        *a.server(port=9180),
        Arg(
            "--workers",
            type=a.count,
            default=1,
            metavar="N",
            help="worker processes, each with its own verifier (default 1)",
        ),
        Arg(
            "--rules",
            metavar="FILE",
            help="route rules (TOML, docs/integrations/route-rules.md); a path no rule covers is "
            "refused, and without rules only auth URLs naming scope= pass",
        ),
        Arg("--realm", default="api", help='WWW-Authenticate realm (default "api")'),
        # The verifier's options: absent ones keep its defaults (docs/reference/verifier.md).
        Group(
            Arg(
                "--revocation-bound",
                type=a.seconds(allow_zero=True),
                metavar="SECONDS",
                help="PostgreSQL: how long a checked key is trusted while push is down (0: ask "
                "each time)",
            ),
            Arg(
                "--check-timeout",
                type=a.seconds(allow_zero=False),
                metavar="SECONDS",
                help="the longest a check waits for the database or argon2 before 503",
            ),
            Arg(
                "--check-workers",
                type=a.count,
                metavar="N",
                help="threads for database reads and argon2",
            ),
            Arg(
                "--max-pending-checks",
                type=a.count,
                metavar="N",
                help="checks queued or running before 503 at once (at least --check-workers)",
            ),
            title="the verifier (defaults as in the verifier's Options)",
        ),
        Group(
            Arg(
                "--limits-url",
                metavar="URL",
                help="where limits count: redis://HOST:PORT/DB, a Valkey or Redis every host "
                "shares (default: $APIKEY_TUI_LIMITS_URL, else the key database)",
            ),
            Arg(
                "--limits-fail",
                choices=("closed", "open"),
                help="when that store fails: closed answers 503 (default), open admits N/P "
                "per process from memory",
            ),
            Arg(
                "--limits-processes",
                type=a.count,
                metavar="P",
                help="fail-open: the processes of the whole deployment (default: --workers)",
            ),
            title="limits (docs/reference/limits.md)",
        ),
        Group(
            Arg(
                "--trusted-proxy",
                action="append",
                default=[],
                metavar="ADDR",
                help="a proxy (address or network) whose forwarding header names the client for "
                "network rules; repeatable (default: $APIKEY_TUI_TRUSTED_PROXIES)",
            ),
            Arg(
                "--client-header",
                choices=("x-forwarded-for", "forwarded"),
                help="the header those proxies set: x-forwarded-for (default) or forwarded",
            ),
            title="network rules (docs/reference/networks.md)",
        ),
    ),
    examples=(
        "apikey-tui serve-auth --port 9180 --rules rules.toml",
        "apikey-tui serve-auth --workers 4 --database-url postgresql+psycopg://svc@db/keys",
    ),
)
