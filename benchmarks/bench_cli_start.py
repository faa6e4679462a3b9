"""The CLI's start-up: `--help`, a group's help and `completion bash` beside `python -c pass`.

Whole processes, run in turns (pass, then each command, then pass again …) so that a noisy
moment of the shared machine falls on all of them alike; the median of each.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 25
# As a user runs it: the `apikey-tui` script pip installed beside this interpreter.
SCRIPT = str(Path(sys.executable).with_name("apikey-tui"))
COMMANDS = {
    "python_pass_s": [sys.executable, "-c", "pass"],
    "help_s": [SCRIPT, "--help"],
    "module_help_s": [sys.executable, "-m", "apikey_tui", "--help"],
    "keys_help_s": [SCRIPT, "keys", "--help"],
    "usage_error_s": [SCRIPT, "keys", "create", "x"],
    "completion_bash_s": [SCRIPT, "completion", "bash"],
}


def main() -> None:
    # As a user's machine runs it: with bytecode written and reused (a shell that sets
    # PYTHONDONTWRITEBYTECODE would compile cli/ on every run, about 20 ms).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for command in COMMANDS.values():  # writes the bytecode once, before timing
        subprocess.run(command, capture_output=True, check=False, env=env)
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    for _ in range(RUNS):
        for name, command in COMMANDS.items():
            start = time.perf_counter()
            subprocess.run(command, capture_output=True, check=False, env=env)
            times[name].append(time.perf_counter() - start)
    result = {name: statistics.median(values) for name, values in times.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
