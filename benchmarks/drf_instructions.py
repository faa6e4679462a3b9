"""Instructions per request of bench_middleware's DRF views, under callgrind: a figure that moves
far less than the timed one with the machine's load, to judge a change to the DRF path.

    python -m benchmarks.drf_instructions [requests]     # needs valgrind, cc and callgrind.h

Same set-up as the timed DRF script (its views, its request, a real verifier recording usage),
then alternating phases of `requests` requests of each view (library, hand-written, hand-written,
library), each counted alone in the main thread (CALLGRIND_ZERO/DUMP_STATS around it) with the
heap collected before it and gc on; background threads are counted apart and left out, and
address randomisation is off (setarch -R). The library view's count holds within ~400
instructions from run to run, load or not; the hand-written view's moves by up to ~2,500 (it is
the same code: the interpreter's caches and libcrypto see a different process each run), so
compare changes by the library view's count, and read the difference with that in mind.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_middleware import DRF

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("drf_library", "drf_handwritten")

HELPER = """
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; }
void cg_zero(void) { CALLGRIND_ZERO_STATS; }
void cg_dump(const char *name) { CALLGRIND_DUMP_STATS_AT(name); }
"""

# Callgrind runs Python ~70 times slower: work the verifier does every so many seconds (usage
# drains, last-used writes, the database file's place check), and the interpreter's caches it
# disturbs, would land ~70 times as often per request as in a server. Their periods are
# stretched as much, so a request's count is close to its native one (unstretched, the library
# view's count moved by ~2,000 with the machine's load).
SLOW = 70
STRETCH = f"""
import apikey_tui.verifier.checker as checker, apikey_tui.verifier.use_counts as use_counts
from apikey_tui.verifier.freshness import CommitFreshness
use_counts.DRAIN_INTERVAL *= {SLOW}
checker.MAX_USAGE_INTERVAL *= {SLOW}
CommitFreshness.PLACE_CHECK *= {SLOW}
_from_url = checker.Verifier.from_url.__func__
checker.Verifier.from_url = classmethod(
    lambda cls, url, **options: _from_url(cls, url, flush_interval=5.0 * {SLOW}, **options)
)
"""

# The DRF script up to its timed rounds (its verifier made with the periods above), then the
# counted phases.
COUNT = (
    STRETCH
    + DRF.split("times = {name: [] for name in views}")[0]
    + """
import ctypes, gc
cg = ctypes.CDLL(sys.argv[3])
n = int(sys.argv[4])
cg.cg_start()
order = ["drf_library", "drf_handwritten", "drf_handwritten", "drf_library"]
for phase, name in enumerate(order):
    view = views[name]
    gc.collect()
    cg.cg_zero()
    for _ in range(n):
        view(request)
    cg.cg_dump(f"{name}.{phase // 2}".encode())
verifier.close()
"""
)


def count(url: str, key: str, requests: int = 1000) -> dict[str, float]:
    """Instructions per request of each view (the mean of its two phases) and the difference."""
    with tempfile.TemporaryDirectory(prefix="apikey-callgrind-") as folder:
        helper = Path(folder, "cgctl.so")
        source = Path(folder, "cgctl.c")
        source.write_text(HELPER)
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", helper, source], check=True)
        out = Path(folder, "callgrind.out")
        subprocess.run(
            [
                "setarch", "-R", "valgrind", "--tool=callgrind", "--instr-atstart=no",
                "--separate-threads=yes",
                f"--callgrind-out-file={out}", sys.executable, "-c", COUNT, url, key,
                str(helper), str(requests),
            ],
            check=True, cwd=ROOT, capture_output=True, timeout=3600,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        phases: dict[str, float] = {}
        for dump in Path(folder).glob("callgrind.out.*-01"):  # thread 1: the requests
            text = dump.read_text()
            trigger = re.search(r"Trigger: Client Request: (\S+)", text)
            total = re.search(r"^summary: (\d+)", text, re.M)
            if trigger and total:
                phases[trigger.group(1)] = int(total.group(1)) / requests
    result = {f"{name}_ir": (phases[f"{name}.0"] + phases[f"{name}.1"]) / 2 for name in NAMES}
    result["library_over_handwritten_ir"] = result["drf_library_ir"] - result["drf_handwritten_ir"]
    result["requests_per_phase"] = requests
    return {name: round(value) for name, value in result.items()}


def main() -> None:
    from apikey_tui.hashing import SecretHasher
    from apikey_tui.store import KeyStore
    from benchmarks.servers import database

    requests = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    with database("sqlite") as url:
        store = KeyStore.open(url, hasher=SecretHasher("cheapest"))
        key = store.create_key("bench", "load", ["serving", "project"]).plaintext
        store.close()
        print(json.dumps(count(url, key, requests)))


if __name__ == "__main__":
    main()
