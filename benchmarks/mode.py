"""How many repetitions a benchmark takes: all, or fewer under BENCH_QUICK=1 (`run --quick`)."""

from __future__ import annotations

import os

QUICK = os.environ.get("BENCH_QUICK") == "1"


def reps(full: int, quick: int) -> int:
    """`full` repetitions, or `quick` ones in quick mode: every figure still measured, with
    fewer pairs, rounds or runs behind it (the sections say how many)."""
    return quick if QUICK else full
