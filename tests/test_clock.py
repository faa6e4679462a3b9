"""One wall clock: only apikey_tui.clock reads the time of day; each part uses the one given."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from apikey_tui.store import KeyStore
from apikey_tui.verifier import Verifier
from tests.conftest import FakeClock

SOURCE = Path(__file__).parent.parent / "src" / "apikey_tui"
# Calls that read the time of day. time.monotonic and perf_counter measure spans: allowed.
WALL_CLOCK = {("datetime", "now"), ("datetime", "utcnow"), ("date", "today"), ("time", "time")}


def wall_clock_reads(path: Path) -> Iterator[str]:
    """Each `datetime.now`, `datetime.utcnow`, `date.today` or `time.time` named in a module."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in WALL_CLOCK
        ):
            yield f"{path.relative_to(SOURCE)}:{node.lineno} {node.value.id}.{node.attr}"


def test_only_the_clock_module_reads_the_wall_clock() -> None:
    """No module but apikey_tui/clock.py names a wall-clock reading (a second clock drifts)."""
    found = [
        read
        for path in sorted(SOURCE.rglob("*.py"))
        if path.name != "clock.py" or path.parent != SOURCE
        for read in wall_clock_reads(path)
    ]
    assert found == []
    assert list(wall_clock_reads(SOURCE / "clock.py")) == ["clock.py:19 datetime.now"]


def test_the_verifier_records_last_use_on_its_clock(
    clocked: tuple[KeyStore, Verifier], clock: FakeClock
) -> None:
    """The last-used time a verifier writes is its given clock's time, not the machine's."""
    store, checker = clocked
    key = store.create_key("alice", "demo", ["project"]).plaintext
    checker.verify(f"ApiKey {key}")
    checker.flush()
    assert store.get_key("alice", "demo").last_used_at == clock()
