"""Leak response: offline scan speed against grep, and report-to-refusal through serve-leaks.

Scan: a directory of source text (this machine's installed Python packages, repeated to
SCAN_MB) with a few keys in it; `scan_paths` in-process and the whole `apikey-tui scan
--offline` process, against `grep -rE` with the same pattern (keyformat.KEY_PATTERN), each the
median of 5 runs on a warm page cache.

Containment: serve-leaks on PostgreSQL (its own process) and two verifier processes (default
revocation_bound of 1 s, so push is what makes it fast) that hold a key in their caches; each
round POSTs a signed report naming the key (or a /revoke, which answers before it works) and
the lag runs from just before the POST to each verifier's first refusal.
"""

from __future__ import annotations

import base64
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from apikey_tui import keyformat
from apikey_tui.leaks.scan import scan_paths
from apikey_tui.store import KeyStore
from benchmarks.bench_revocation import CHECKER, _percentile
from benchmarks.servers import database, free_port

SCAN_MB = int(os.environ.get("BENCH_SCAN_MB", "200"))
KEYS_FILE_MB = int(os.environ.get("BENCH_KEYS_FILE_MB", "8"))
FILE_BYTES = 256 * 1024
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "200"))
REVOKE_ROUNDS = 50
CLI = Path(sys.executable).with_name("apikey-tui")


def _corpus(folder: Path) -> tuple[int, int]:
    """Write SCAN_MB of source text in FILE_BYTES files, one key every 50 files."""
    site = Path(sysconfig.get_paths()["purelib"])
    text = b"".join(p.read_bytes() for p in sorted(site.rglob("*.py"))[:4000])
    total, n, keys = SCAN_MB * 1024 * 1024, 0, 0
    while n * FILE_BYTES < total:
        start = (n * 7919 * 1024) % (len(text) - FILE_BYTES)
        chunk = text[start : start + FILE_BYTES]
        if n % 50 == 0:
            chunk = (
                chunk[:1000] + f"\nTOKEN = '{keyformat.generate()[1]}'\n".encode() + chunk[1000:]
            )
            keys += 1
        sub = folder / f"d{n // 100:03d}"
        sub.mkdir(exist_ok=True)
        (sub / f"f{n:05d}.py").write_bytes(chunk)
        n += 1
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()), keys


def _median_seconds(run: Any, times: int = 5) -> float:
    spans = []
    for _ in range(times):
        started = time.perf_counter()
        run()
        spans.append(time.perf_counter() - started)
    return statistics.median(spans)


def scan_speed() -> dict[str, Any]:
    """MB/s of the offline scan, in-process and as a command, and grep's on the same files."""
    with tempfile.TemporaryDirectory(prefix="apikey-scan-") as name:
        folder = Path(name)
        size, keys = _corpus(folder)

        def in_process() -> None:
            found = list(scan_paths([str(folder)], lambda error: None))
            assert len(found) == keys

        def command() -> None:
            done = subprocess.run([CLI, "scan", "--offline", str(folder)], capture_output=True)
            assert done.returncode == 1

        def grep() -> None:
            done = subprocess.run(
                ["grep", "-rE", keyformat.KEY_PATTERN, str(folder)], capture_output=True
            )
            assert done.returncode == 0 and done.stdout.count(b"\n") == keys

        grep()  # warm the page cache
        scan_s, command_s, grep_s = (_median_seconds(f) for f in (in_process, command, grep))
    mb = size / 1e6
    return {
        "megabytes": mb,
        "files": len(range(0, SCAN_MB * 1024 * 1024, FILE_BYTES)),
        "keys": keys,
        "scan_mb_s": mb / scan_s,
        "command_mb_s": mb / command_s,
        "grep_mb_s": mb / grep_s,
        "scan_vs_grep": grep_s / scan_s,  # below 1: slower than grep
        "command_vs_grep": grep_s / command_s,
    }


def dense_keys() -> dict[str, Any]:
    """Seconds to scan one file made of keys only (KEYS_FILE_MB, one key a line, in-process):
    the case that was quadratic (each key's line counted from the chunk's start: 1 MB 17 s,
    4 MB 185 s). A linear scan takes about as long per MB at any size."""
    rows = []
    for megabytes in (1, KEYS_FILE_MB):
        with tempfile.TemporaryDirectory(prefix="apikey-keys-") as name:
            path = Path(name) / "keys.env"
            line = f"{keyformat.generate()[1]}\n".encode()
            count = megabytes * 1024 * 1024 // len(line)
            # One key repeated: the checksum passes for each, and generating 50,000 keys would
            # take longer than the scan.
            path.write_bytes(line * count)

            def run(path: Path = path, count: int = count) -> None:
                found = list(scan_paths([str(path)], lambda error: None))
                assert len(found) == count and found[-1].line == count

            seconds = _median_seconds(run, times=3)
        rows.append({"megabytes": megabytes, "keys": count, "seconds": seconds})
    return {"files": rows}


class _GitHub:
    """A P-256 key playing GitHub's, and its published keys file."""

    def __init__(self, folder: Path) -> None:
        self.private = ec.generate_private_key(ec.SECP256R1())
        pem = self.private.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        self.file = folder / "github-keys.json"
        entry = {"key_identifier": "bench", "key": pem.decode(), "is_current": True}
        self.file.write_text(json.dumps({"public_keys": [entry]}))

    def headers(self, body: bytes) -> dict[str, str]:
        signature = self.private.sign(body, ec.ECDSA(hashes.SHA256()))
        return {
            "Github-Public-Key-Identifier": "bench",
            "Github-Public-Key-Signature": base64.b64encode(signature).decode(),
            "Content-Type": "application/json",
        }


def _post(port: int, path: str, body: bytes, headers: dict[str, str]) -> int:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=body, headers=headers, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (http to ourselves)
        response.read()
        return int(response.status)


def _wait_listening(port: int, process: subprocess.Popen[bytes]) -> None:
    import socket

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert process.poll() is None, "serve-leaks exited"
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("serve-leaks did not start")


# bench_revocation's checker with a 1 ms pause between checks: a service checking ~1000 keys
# a second instead of two processes spinning on both cores, which starves serve-leaks itself.
PACED_CHECKER = CHECKER.replace(
    "            print(time.time(), flush=True)\n            break\n",
    "            print(time.time(), flush=True)\n            break\n        time.sleep(0.001)\n",
)
assert PACED_CHECKER != CHECKER


def containment(url: str, checker_code: str = CHECKER) -> dict[str, Any]:
    """Report (and /revoke) to each verifier's first refusal, in ms."""
    store = KeyStore.open(url)
    folder = Path(tempfile.mkdtemp(prefix="apikey-leaks-"))
    github = _GitHub(folder)
    port = free_port()
    server = subprocess.Popen(
        [str(CLI), "serve-leaks", "--database-url", url, "--port", str(port),
         "--github-keys", str(github.file), "--revoke-per-minute", "100000"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    checkers = [
        subprocess.Popen(
            [sys.executable, "-c", checker_code, url],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    lags: dict[str, list[float]] = {"report": [], "revoke": []}
    never = 0
    try:
        _wait_listening(port, server)
        for n in range(ROUNDS + REVOKE_ROUNDS):
            key = store.create_key("bench", f"k{n}", ["project"]).plaintext
            for checker in checkers:
                assert checker.stdin is not None
                checker.stdin.write(key + "\n")
                checker.stdin.flush()
            for checker in checkers:
                assert checker.stdout is not None
                assert checker.stdout.readline().strip() == "ready"
            kind = "report" if n < ROUNDS else "revoke"
            if kind == "report":
                body = json.dumps(
                    [{"token": key, "type": "apikey_tui", "url": "https://x", "source": "content"}]
                ).encode()
                headers = github.headers(body)
                sent = time.time()
                assert _post(port, "/github", body, headers) == 200
            else:
                body = json.dumps({"credentials": [key]}).encode()
                sent = time.time()
                assert _post(port, "/revoke", body, {"Content-Type": "application/json"}) == 202
            for checker in checkers:
                assert checker.stdout is not None
                answer = checker.stdout.readline().strip()
                if answer == "never":
                    never += 1
                else:
                    lags[kind].append((float(answer) - sent) * 1000)
    finally:
        server.terminate()
        server.wait()
        for checker in checkers:
            checker.kill()
            checker.wait()
        store.close()
    result: dict[str, Any] = {"never_refused": never}
    for kind, values in lags.items():
        result[kind] = {
            "rounds": ROUNDS if kind == "report" else REVOKE_ROUNDS,
            "refusals": len(values),
            "p50_ms": statistics.median(values),
            "p99_ms": _percentile(values, 0.99),
            "max_ms": max(values),
        }
    return result


def markdown(r: Any) -> list[str]:
    """The RESULTS.md section for these numbers (for benchmarks/run.py to render)."""
    if r is None:
        return []
    s, c = r["scan"], r["containment"]
    met = "met" if s["scan_mb_s"] >= 200 else "**missed**"
    lines = [
        "## Leak response (`bench_leaks.py`)",
        "",
        f"Offline scan of {s['megabytes']:.0f} MB of Python source in {s['files']:,} files"
        f" ({s['keys']} keys planted), warm page cache, median of 5; grep is `grep -rE` with the"
        " same pattern (`keyformat.KEY_PATTERN`). A ratio above 1 is faster than grep.",
        "",
        "| scanner | MB/s | vs grep | target |",
        "|---|---|---|---|",
        f"| `scan_paths` (in-process) | {s['scan_mb_s']:.0f} | {s['scan_vs_grep']:.2f}x |"
        f" ≥ 200 MB/s {met} |",
        f"| `apikey-tui scan --offline` (whole process) | {s['command_mb_s']:.0f} |"
        f" {s['command_vs_grep']:.2f}x | |",
        f"| `grep -rE` | {s['grep_mb_s']:.0f} | 1x | |",
        "",
    ]
    dense = r.get("dense_keys")
    if dense is not None:
        cells = ", ".join(
            f"{d['megabytes']} MB ({d['keys']:,} keys) {d['seconds']:.2f} s" for d in dense["files"]
        )
        lines += [
            "One file of keys only, one a line (`scan_paths` in-process, median of 3; before"
            f" the line count was made linear, 1 MB took 17 s and 4 MB 185 s): {cells}.",
            "",
        ]
    lines += [
        "From report to refusal on PostgreSQL: serve-leaks in its own process, two verifier"
        " processes (default `revocation_bound` of 1 s) holding the key in their caches; the lag"
        " runs from just before the POST to each verifier's first refusal. A report is checked"
        " (signature, argon2 `key-secret-v1`) and the key disabled before serve-leaks answers;"
        " /revoke answers 202 first and works after. *Spinning*: each verifier checks the key in"
        " a tight loop, as `bench_revocation.py` does (the two of them hold both cores, so"
        " serve-leaks' own ~10 ms of work waits for CPU); *paced*: a 1 ms pause between checks.",
        "",
        "| verifiers | path | refusals | p50 | p99 | max | never refused | target |",
        "|---|---|---|---|---|---|---|---|",
    ]
    paths = (("report", "signed report, `POST /github`"), ("revoke", "`POST /revoke`"))
    for name, label in (("containment", "spinning"), ("containment_paced", "paced")):
        c = r.get(name)
        if c is None:
            continue
        for kind, path in paths:
            k = c[kind]
            goal = "met" if k["p99_ms"] <= 50 and c["never_refused"] == 0 else "**missed**"
            lines.append(
                f"| {label} | {path} | {k['refusals']} | {k['p50_ms']:.1f} ms |"
                f" {k['p99_ms']:.1f} ms | {k['max_ms']:.1f} ms | {c['never_refused']} |"
                f" p99 ≤ 50 ms {goal} |"
            )
    return [*lines, ""]


def main() -> None:
    """Print one JSON object with every measurement."""
    started = time.monotonic()
    results: dict[str, Any] = {"scan": scan_speed(), "dense_keys": dense_keys()}
    with database("postgresql") as url:
        results["containment"] = containment(url)
    with database("postgresql") as url:
        results["containment_paced"] = containment(url, PACED_CHECKER)
    results["seconds"] = time.monotonic() - started
    print(json.dumps(results))


if __name__ == "__main__":
    main()
