"""Real processes racing and dying: duplicates and kill -9 on SQLite and PostgreSQL."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from multiprocessing.synchronize import Barrier
from typing import Any

import pytest
from sqlalchemy import text

from apikey_tui.errors import DuplicateKeyNameError, KeyNotFoundError
from apikey_tui.hashing import SecretHasher
from apikey_tui.store import KeyStore

ROUNDS = 100


def _racer(url: str, barrier: Barrier, results: Any) -> None:
    store = KeyStore.open(url, hasher=SecretHasher("cheapest"))
    for round_no in range(ROUNDS):
        barrier.wait(timeout=60)
        try:
            store.create_key("alice", f"race-{round_no}", ["project"])
            results.put((round_no, "won"))
        except DuplicateKeyNameError:
            results.put((round_no, "duplicate"))
        except Exception as exc:  # reported to the parent, which fails the test with it
            results.put((round_no, f"{type(exc).__name__}: {exc}"))
    store.close()


@pytest.mark.slow
def test_two_processes_creating_one_name_exactly_one_wins(database_url: str) -> None:
    """Two processes create one name at once, 100 times: one wins, the other gets a duplicate."""
    KeyStore.open(database_url).close()  # the schema exists before the race starts
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(2)
    results = context.Queue()
    workers = [context.Process(target=_racer, args=(database_url, barrier, results)) for _ in "ab"]
    for worker in workers:
        worker.start()
    outcomes: dict[int, list[str]] = {}
    for _ in range(2 * ROUNDS):
        round_no, outcome = results.get(timeout=120)
        outcomes.setdefault(round_no, []).append(outcome)
    for worker in workers:
        worker.join(timeout=30)
    assert all(sorted(o) == ["duplicate", "won"] for o in outcomes.values()), outcomes
    assert len(outcomes) == ROUNDS


def _churn(url: str, ready: Any = None) -> None:
    store = KeyStore.open(url, hasher=SecretHasher("cheapest"))
    rng = random.Random()
    while True:
        name = f"k{rng.randrange(4)}"
        try:
            action = rng.random()
            if action < 0.4:
                store.create_key("alice", name, ["project", "serving"])
            elif action < 0.8:
                store.recreate_key("alice", name)
            else:
                store.delete_key("alice", name)
        except (DuplicateKeyNameError, KeyNotFoundError):
            continue
        if ready is not None:
            # Killed from now on: at random moments of its writes, not of its start-up, and
            # after one write (under load, a connect could outlast every kill moment).
            ready.set()


def _check_consistent(store: KeyStore) -> None:
    with store.engine.connect() as conn:
        orphans = conn.execute(
            text(
                "SELECT count(*) FROM apikey_tui_key k WHERE k.secret_hash NOT LIKE '$argon2id$%'"
                " OR NOT EXISTS (SELECT 1 FROM apikey_tui_key_scope s WHERE s.key_id = k.id)"
            )
        ).scalar_one()
        twins = conn.execute(
            text(
                "SELECT count(*) FROM (SELECT owner, name FROM apikey_tui_key"
                " GROUP BY owner, name HAVING count(*) > 1) t"
            )
        ).scalar_one()
        dangling = conn.execute(
            text(
                "SELECT count(*) FROM apikey_tui_key_scope s"
                " WHERE NOT EXISTS (SELECT 1 FROM apikey_tui_key k WHERE k.id = s.key_id)"
            )
        ).scalar_one()
        assert (orphans, twins, dangling) == (0, 0, 0)
        if conn.dialect.name == "sqlite":
            assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"


@pytest.mark.slow
def test_kill_9_during_create_and_recreate_leaves_no_half_written_key(database_url: str) -> None:
    """A writer killed with SIGKILL at random moments, 100 times, never leaves a broken key."""
    KeyStore.open(database_url).close()
    # fork, not spawn: a hundred fresh interpreters would cost a minute; the parent holds no
    # database connection at this point, so the child shares nothing with it.
    context = multiprocessing.get_context("fork")
    rng = random.Random(9)
    for _ in range(ROUNDS):
        ready = context.Event()
        worker = context.Process(target=_churn, args=(database_url, ready))
        worker.start()
        assert ready.wait(30)
        time.sleep(rng.uniform(0.02, 0.12))
        assert worker.pid is not None
        os.kill(worker.pid, signal.SIGKILL)
        worker.join(timeout=10)
        assert worker.exitcode == -signal.SIGKILL
    store = KeyStore.open(database_url, hasher=SecretHasher("cheapest"))
    try:
        _check_consistent(store)
        # Each worker wrote once before its kill; more than that, most rounds (not asserted).
        assert len(store.events(limit=1000)) >= ROUNDS
    finally:
        store.close()  # a failure here must not leave a connection to a later test
