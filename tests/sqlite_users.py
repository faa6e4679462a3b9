"""Processes that use one SQLite key database the way services and admins do, for lock tests.

Run as a script (never collected by pytest):

    python tests/sqlite_users.py verify-loop URL KEY SECONDS MAX_CHECKS PROFILE
        one verifier checks KEY in a tight loop: a service's hot path;
    python tests/sqlite_users.py churn URL KEY SECONDS MAX_ROUNDS PROFILE
        builds a verifier, checks KEY once, closes it, then lists keys through a fresh KeyStore
        and closes that too, round after round: new workers and admin tools coming and going.

PROFILE is the argon2 profile KEY was made with ("cheapest" in tests, "default" for keys made
by the CLI), so that no verifier upgrades its hash. Each stops at SECONDS or at its count,
whichever comes first, and prints {"rounds": n} as JSON. A process killed by a signal (SIGBUS
when the -shm file is rebuilt under its mapping) prints nothing and its return code is minus
the signal number.
"""

from __future__ import annotations

import json
import sys
import time

from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier


def verify_loop(url: str, key: str, seconds: float, limit: int, hasher: SecretHasher) -> int:
    """Check one key over and over with one verifier; return how many checks passed."""
    verifier = Verifier.from_url(url, hasher=hasher)
    header = f"ApiKey {key}"
    deadline = time.monotonic() + seconds
    checks = 0
    try:
        while checks < limit and time.monotonic() < deadline:
            verifier.verify(header)
            checks += 1
    finally:
        verifier.close()
    return checks


def churn(url: str, key: str, seconds: float, limit: int, hasher: SecretHasher) -> int:
    """Open and close verifiers and key stores in turn; return how many rounds completed."""
    header = f"ApiKey {key}"
    deadline = time.monotonic() + seconds
    rounds = 0
    while rounds < limit and time.monotonic() < deadline:
        verifier = Verifier.from_url(url, hasher=hasher)
        try:
            verifier.verify(header)
        finally:
            verifier.close()
        store = KeyStore.open(url, hasher=hasher, create=False)
        try:
            store.list_keys("alice")
        finally:
            store.close()
        rounds += 1
    return rounds


def main(argv: list[str]) -> int:
    """Run the mode named in argv and print its count."""
    mode, url, key, seconds, limit, profile = argv
    run = {"verify-loop": verify_loop, "churn": churn}[mode]
    rounds = run(url, key, float(seconds), int(limit), SecretHasher(profile))
    print(json.dumps({"rounds": rounds}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
