"""The verifier's packed key index: exact answers, a bounded size, loading off the request path."""

from __future__ import annotations

import base64
import gc
import os
import threading
from collections.abc import Iterator

import pytest

from apikey_tui import keyformat
from apikey_tui.hashing import fingerprint
from apikey_tui.verifier.key_index import KeyIndex, PackedBuilder, PackedIds, Verdict


def _keys(count: int) -> list[tuple[str, str, str]]:
    """(public id, secret, fingerprint) of count fresh keys."""
    keys = []
    for _ in range(count):
        parts, _text = keyformat.generate()
        keys.append((parts.public_id, parts.secret, fingerprint(parts.public_id, parts.secret)))
    return keys


def _random_ids(count: int) -> list[tuple[str, str | None]]:
    """(public id, fingerprint) pairs of the stored shape, made quickly (no key, no hash)."""
    return [
        ("ak" + base64.b32encode(os.urandom(10)).decode().lower(), os.urandom(8).hex())
        for _ in range(count)
    ]


def _pages(rows: list[tuple[str, str | None]], gate: threading.Event | None = None):  # type: ignore[no-untyped-def]
    """A fingerprint_page stand-in over rows (row ids 1..n); waits on gate before each page."""

    def page(after: int, limit: int) -> tuple[int, list[tuple[str, str | None]]]:
        if gate is not None:
            assert gate.wait(10)
        chunk = rows[after : after + limit]
        return after + len(chunk), chunk

    return page


def test_packed_ids_find_every_key_and_no_other() -> None:
    """Every added id gives back its fingerprint's 8 bytes; an id never added gives None."""
    keys = _keys(3000)
    builder = PackedBuilder(len(keys))
    for public_id, _secret, fp in keys:
        builder.add(public_id, fp)
    packed = builder.freeze()
    assert len(packed) == 3000
    for public_id, _secret, fp in keys:
        assert packed.get(public_id) == bytes.fromhex(fp)
    for public_id, _secret, _fp in _keys(200):
        assert packed.get(public_id) is None


def test_a_match_across_two_records_is_not_a_key() -> None:
    """An id whose text spans one record's fingerprint and the next record's id is not found."""
    first, second = _keys(2)
    tail = "abcdefgh"  # the first record's fingerprint bytes, spelled in the id alphabet
    record_one = first[0][2:].encode() + tail.encode()
    record_two = second[0][2:].encode() + bytes.fromhex(second[2])
    packed = PackedIds.single(record_one + record_two, 2)  # every id lands in its one bucket
    straddling = "ak" + tail + second[0][2:10]
    # it has the shape of an id: the prefix, then as many characters of the id alphabet
    assert straddling.startswith(keyformat.PREFIX) and len(straddling) == len(second[0])
    assert set(straddling.removeprefix(keyformat.PREFIX)) <= set(keyformat.ALPHABET)
    assert packed.get(straddling) is None
    assert packed.get(second[0]) == bytes.fromhex(second[2])


def test_the_index_is_a_few_large_buffers_not_a_small_object_per_bucket() -> None:
    """100,000 keys are held in two objects (records, offsets) whatever the count: tens of
    thousands of small ones fragmented the heap and cost the process 3x the records' size."""
    builder = PackedBuilder(100_000)
    for public_id, fp in _random_ids(100_000):
        builder.add(public_id, fp)
    packed = builder.freeze()
    held = [ref for ref in gc.get_referents(packed) if not isinstance(ref, int | type)]
    inner = [r for ref in held if isinstance(ref, list) for r in ref]
    assert len(held) + len(inner) <= 2


def test_the_index_costs_at_most_40_bytes_a_key() -> None:
    """100,000 keys take at most 40 bytes each, buckets and all (a dict took ~350)."""
    builder = PackedBuilder(100_000)
    for public_id, fp in _random_ids(100_000):
        builder.add(public_id, fp)
    packed = builder.freeze()
    assert packed.nbytes() / len(packed) <= 40


def test_an_index_still_loading_vouches_for_nothing_it_lacks() -> None:
    """While the snapshot loads, an absent id is UNSURE (look it up), never UNKNOWN (401)."""
    keys = _keys(10)
    gate = threading.Event()
    index = KeyIndex(lambda: len(keys), _pages([(k[0], k[2]) for k in keys], gate))
    index.load_from(1)
    public_id, secret, _fp = keys[0]
    assert index.judge(public_id, secret)[0] is Verdict.UNSURE
    assert not index.trusted
    gate.set()
    assert index.wait_loaded(10)
    assert index.judge(public_id, secret)[0] is Verdict.MATCH
    assert index.judge(public_id, keys[1][1])[0] is Verdict.WRONG
    assert index.judge(_keys(1)[0][0], secret)[0] is Verdict.UNKNOWN
    assert len(index) == 10


def test_changes_from_the_log_override_the_snapshot() -> None:
    """A deleted key becomes UNKNOWN, a new one MATCHes, a recreated one judges its new secret."""
    keys = _keys(3)
    index = KeyIndex(lambda: 3, _pages([(k[0], k[2]) for k in keys[:2]]))
    index.load_from(1)
    assert index.wait_loaded(10)
    (gone, gone_secret, _), (recreated, old_secret, _), (new, new_secret, new_fp) = keys
    fresh_secret = _keys(1)[0][1]
    index.apply(
        [
            (2, gone, None, False),
            (3, new, new_fp, True),
            (4, recreated, fingerprint(recreated, fresh_secret), True),
        ]
    )
    assert index.judge(gone, gone_secret)[0] is Verdict.UNKNOWN
    assert index.judge(new, new_secret)[0] is Verdict.MATCH
    assert index.judge(recreated, old_secret)[0] is Verdict.WRONG
    assert index.judge(recreated, fresh_secret)[0] is Verdict.MATCH
    assert len(index) == 2


def test_keys_made_before_fingerprints_are_legacy() -> None:
    """A key stored without a fingerprint can only be judged by argon2."""
    (public_id, secret, _fp) = _keys(1)[0]
    index = KeyIndex(lambda: 1, _pages([(public_id, None)]))
    index.load_from(1)
    assert index.wait_loaded(10)
    assert index.judge(public_id, secret)[0] is Verdict.LEGACY


def test_a_reader_behind_the_log_distrusts_until_reloaded() -> None:
    """After falling behind the pruned log, an id the old snapshot lacks is UNSURE again."""
    keys = _keys(2)
    rows: list[tuple[str, str | None]] = [(keys[0][0], keys[0][2])]
    gate = threading.Event()
    gate.set()
    index = KeyIndex(lambda: len(rows), _pages(rows, gate))
    index.load_from(1)
    assert index.wait_loaded(10)
    assert index.judge(keys[1][0], keys[1][1])[0] is Verdict.UNKNOWN
    gate.clear()
    rows.append((keys[1][0], keys[1][2]))
    index.load_from(9, distrust=True)
    assert index.judge(keys[1][0], keys[1][1])[0] is Verdict.UNSURE
    assert index.judge(keys[0][0], keys[1][1])[0] is Verdict.UNSURE  # WRONG is not final either
    gate.set()
    assert index.wait_loaded(10)
    assert index.judge(keys[1][0], keys[1][1])[0] is Verdict.MATCH


@pytest.mark.parametrize("count", [0, 1, 5000, 5001])
def test_loading_reads_every_page(count: int) -> None:
    """Keys on a page boundary, or none at all, all reach the snapshot."""
    index = KeyIndex(lambda: count, _pages(list(_random_ids(count))))
    index.load_from(1)
    assert index.wait_loaded(10)
    assert len(index) == count


def test_a_reload_never_shows_requests_a_half_filled_index() -> None:
    """While a new snapshot loads page by page, requests are judged by the whole previous one."""
    rows = _random_ids(12_000)
    gate = threading.Event()
    gate.set()
    index = KeyIndex(lambda: len(rows), _pages(rows, gate))
    index.load_from(1)
    assert index.wait_loaded(10)
    gate.clear()
    index.load_from(2)  # a reload, held before its first page
    assert index.trusted and len(index) == 12_000
    assert all(index.judge(pid, "x" * 52)[0] is Verdict.WRONG for pid, _fp in rows[::500])
    gate.set()
    assert index.wait_loaded(10) and index.loads == 2


def test_forgetting_an_id_the_index_never_held_keeps_no_entry() -> None:
    """A forged id found missing by a lookup leaves nothing behind; a held id is marked gone."""
    (public_id, secret, fp), (forged, _s, _f) = _keys(2)
    index = KeyIndex(lambda: 1, _pages([(public_id, fp)]))
    index.load_from(1)
    assert index.wait_loaded(10)
    index.forget(forged)
    index.forget(public_id)
    assert len(index) == 0
    assert index.judge(public_id, secret)[0] is Verdict.UNKNOWN
    assert forged not in index._overlay  # the memory a flood would have bought


def test_a_change_applied_while_a_snapshot_is_put_in_is_kept() -> None:
    """A change read from the log while the loader puts its snapshot in stays in the overlay:
    apply wrote into the overlay the loader had just replaced by its filtered copy, so a key
    created then was UNKNOWN (a 401 for a valid key) until the next reload."""
    (old, _, old_fp), (first, first_secret, first_fp), (second, second_secret, second_fp) = _keys(3)
    gate = threading.Event()
    index = KeyIndex(lambda: 1, _pages([(old, old_fp)], gate))
    index.load_from(4)

    def changes() -> Iterator[tuple[int, str, str | None, bool]]:
        yield 5, first, first_fp, True
        gate.set()  # the snapshot is read and put in while this read is applied
        index.wait_loaded(1)  # with apply holding the overlay, the loader waits for it
        yield 6, second, second_fp, True

    index.apply(changes())
    assert index.wait_loaded(10)
    assert index.judge(first, first_secret)[0] is Verdict.MATCH
    assert index.judge(second, second_secret)[0] is Verdict.MATCH


def test_falling_behind_while_a_snapshot_loads_loads_another() -> None:
    """A reader that falls behind the log while a snapshot loads reads the keys again: the load
    under way went on and was trusted, though its pages were read before changes the reader
    never saw, so a key created then was UNKNOWN (a 401 for a valid key) until a reload."""
    (old, _, old_fp), (new, new_secret, new_fp) = _keys(2)
    rows: list[tuple[str, str | None]] = [(old, old_fp)]
    read, gate = threading.Event(), threading.Event()

    def page(after: int, limit: int) -> tuple[int, list[tuple[str, str | None]]]:
        chunk = rows[after : after + limit]  # read, then held before the snapshot goes in
        read.set()
        assert gate.wait(10)
        return after + len(chunk), chunk

    index = KeyIndex(lambda: len(rows), page)
    index.load_from(1)
    assert read.wait(10)
    rows.append((new, new_fp))  # its entry in the log is pruned before the reader looks
    index.load_from(9, distrust=True)
    gate.set()
    assert index.wait_loaded(10)
    assert index.judge(new, new_secret)[0] is Verdict.MATCH
