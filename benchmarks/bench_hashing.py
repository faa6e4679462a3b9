"""Time and memory of one argon2id hash and verify for each named profile."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

from apikey_tui.hashing import PROFILES, SecretHasher
from apikey_tui.keyformat import generate


def measure(profile: str, rounds: int = 50) -> dict[str, float]:
    """Median milliseconds per hash and per verify for one profile."""
    hasher = SecretHasher(profile)
    secret = generate()[0].secret
    stored = hasher.hash(secret)
    hashes, verifies = [], []
    for _ in range(rounds):
        start = time.perf_counter()
        hasher.hash(secret)
        hashes.append(time.perf_counter() - start)
        start = time.perf_counter()
        hasher.verify(stored, secret)
        verifies.append(time.perf_counter() - start)
    return {
        "hash_ms": statistics.median(hashes) * 1000,
        "verify_ms": statistics.median(verifies) * 1000,
    }


def peak_memory_mib(profile: str) -> float:
    """Growth of a fresh process's peak RSS (VmHWM) caused by one hash, in MiB."""
    code = (
        "import re; from apikey_tui.hashing import SecretHasher\n"
        "def hwm():\n"
        "    return int(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())[1])\n"
        f"h = SecretHasher({profile!r}); before = hwm(); h.hash('x' * 52); print(hwm() - before)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    return int(result.stdout) / 1024


def main() -> None:
    """Print one JSON object: per profile, hash and verify times and peak memory."""
    print(
        json.dumps(
            {p: {**measure(p), "peak_mib": peak_memory_mib(p)} for p in PROFILES},
        )
    )


if __name__ == "__main__":
    main()
