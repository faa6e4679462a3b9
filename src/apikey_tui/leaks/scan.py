"""Find well-formed keys (shape and checksum) in bytes, files, directory trees and git history."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from apikey_tui import keyformat
from apikey_tui.keyformat import MalformedKey, ParsedKey

# The regular expression comes from the key format; bytes, so a file is never decoded. CPython's
# engine searches the literal prefix first, which is what makes this fast (>1 GB/s on text).
PATTERN = re.compile(keyformat.KEY_PATTERN.encode("ascii"))
CHUNK = 8 * 1024 * 1024  # bytes read at a time: memory stays bounded whatever the file's size
# As git and grep judge: a NUL in the first 8000 bytes makes a file binary, and it is skipped.
BINARY_SNIFF = 8000
# Shorter than a key, so a key that straddles two chunks is found exactly once.
_OVERLAP = keyformat.KEY_LENGTH - 1


class ScanError(Exception):
    """A path or repository cannot be scanned (the message names it, never file content)."""


@dataclass(frozen=True)
class Found:
    """A well-formed key and where: path and line, and for git history the commit; the key
    itself (parts and text) never shows in a repr."""

    path: str
    line: int
    key: ParsedKey = field(repr=False)
    text: str = field(repr=False)
    commit: str | None = None

    @property
    def where(self) -> str:
        """`path:line`, or `commit:path:line` in git history (commit shortened to 12)."""
        place = f"{self.path}:{self.line}"
        return f"{self.commit[:12]}:{place}" if self.commit else place


def find_keys(chunks: Iterable[bytes]) -> Iterator[tuple[int, ParsedKey, str]]:
    """(line, key, text) of every well-formed key in a stream of byte chunks, in order."""
    tail = b""
    lines_before = 0  # newlines before the buffer's start
    for chunk in chunks:
        buffer = tail + chunk if tail else chunk
        for match in PATTERN.finditer(buffer):
            text = match.group().decode("ascii")
            try:
                parsed = keyformat.parse(text)
            except MalformedKey:
                continue  # the shape, not the checksum: about one string in 4 billion passes
            yield lines_before + buffer.count(b"\n", 0, match.start()) + 1, parsed, text
        keep = min(_OVERLAP, len(buffer))
        lines_before += buffer.count(b"\n", 0, len(buffer) - keep)
        tail = buffer[len(buffer) - keep :]


def _chunks(handle: BinaryIO, first: bytes = b"") -> Iterator[bytes]:
    if first:
        yield first
    while chunk := handle.read(CHUNK):
        yield chunk


def scan_stream(handle: BinaryIO, path: str = "-") -> Iterator[Found]:
    """Keys in a stream read to its end (standard input: binary or not, it is scanned)."""
    for line, key, text in find_keys(_chunks(handle)):
        yield Found(path, line, key, text)


def scan_file(path: str, *, follow: bool = True) -> Iterator[Found]:
    """Keys in one regular file; a binary file yields nothing (ScanError if unreadable).

    follow=False refuses a symlink at the last step (O_NOFOLLOW), so a file swapped for a link
    after the directory was listed is not read through it.
    """
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    if not follow:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise ScanError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return  # a FIFO or device would block or never end: never scanned
        try:
            first = handle.read(CHUNK)
            if b"\x00" in first[:BINARY_SNIFF]:
                return
            for line, key, text in find_keys(_chunks(handle, first)):
                yield Found(path, line, key, text)
        except OSError as exc:
            raise ScanError(f"cannot read {path}: {exc.strerror}") from None


def walk(root: str) -> Iterator[str]:
    """Regular files under root, sorted, following no symlink (file or directory) and skipping
    `.git` directories (history is `scan_git`'s)."""
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as exc:
        raise ScanError(f"cannot list {root}: {exc.strerror}") from None
    for entry in entries:
        if entry.is_symlink():
            continue  # inside the tree a link's target is scanned where it lives, or not at all
        if entry.is_dir(follow_symlinks=False):
            if entry.name != ".git":
                yield from walk(entry.path)
        elif entry.is_file(follow_symlinks=False):
            yield entry.path


def scan_paths(paths: Iterable[str], on_error: Callable[[ScanError], None]) -> Iterator[Found]:
    """Keys in files and directory trees; a path named here is followed even if it is a link.

    An unreadable file is reported to on_error and the scan goes on; a named path that does not
    exist raises ScanError.
    """
    for path in paths:
        if not os.path.exists(path):
            raise ScanError(f"no such file or directory: {path}")
        if os.path.isdir(path):
            for inner in walk(path):
                try:
                    yield from scan_file(inner, follow=False)
                except ScanError as exc:
                    on_error(exc)
        else:
            try:
                yield from scan_file(path)
            except ScanError as exc:
                on_error(exc)


# --- git history --------------------------------------------------------------------------------


def _git(repository: str, *arguments: str) -> list[str]:
    try:
        done = subprocess.run(
            ["git", "-C", repository, *arguments],
            capture_output=True,
            check=False,
            timeout=3600,
        )
    except OSError as exc:
        raise ScanError(f"cannot run git: {exc.strerror}") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ScanError(f"git failed in {repository}: {message[-1] if message else 'error'}")
    return done.stdout.decode("utf-8", "surrogateescape").splitlines()


def _blobs(repository: str) -> dict[str, str]:
    """Every blob reachable from any ref (removed files included), with a path it had."""
    blobs: dict[str, str] = {}
    for row in _git(repository, "rev-list", "--objects", "--all", "--filter=object:type=blob"):
        oid, named, path = row.partition(" ")
        if named:  # commits are listed too, without a path (the filter drops only trees)
            blobs.setdefault(oid, path)
    return blobs


def _contents(repository: str, oids: list[str]) -> Iterator[tuple[str, bytes]]:
    """(oid, content) of each blob, streamed from one `git cat-file --batch`."""
    process = subprocess.Popen(
        ["git", "-C", repository, "cat-file", "--batch"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdin is not None and process.stdout is not None
    requests = process.stdin

    def feed() -> None:  # a thread: writing every id first could fill both pipes and deadlock
        try:
            for oid in oids:
                requests.write(oid.encode("ascii") + b"\n")
            requests.close()
        except OSError:
            pass  # git ended early; the reader below reports it

    writer = threading.Thread(target=feed, daemon=True)
    writer.start()
    try:
        for oid in oids:
            header = process.stdout.readline().split()
            if len(header) != 3 or header[1] != b"blob":
                raise ScanError(f"git cat-file gave no blob for {oid}")
            size = int(header[2])
            content = process.stdout.read(size + 1)[:size]  # and the newline after it
            yield oid, content
    finally:
        process.kill()
        process.wait()
        writer.join(timeout=5)
        process.stdout.close()


def _introduced(repository: str, oid: str) -> tuple[str | None, str | None]:
    """The first commit (any ref) that added this blob, and its path there."""
    commit: str | None = None
    for row in _git(
        repository, "log", "--all", "--reverse", "-m", "--no-renames", "--raw", "--no-abbrev",
        "--format=commit %H", f"--find-object={oid}",
    ):  # fmt: skip
        if row.startswith("commit "):
            commit = row.split()[1]
        elif row.startswith(":") and commit is not None:
            fields, _, path = row.partition("\t")
            if fields.split()[3] == oid:
                return commit, path
    return None, None


def scan_git(repository: str) -> Iterator[Found]:
    """Keys in every blob in the history of every ref; each is placed at the commit that added
    it (a key deleted by a later commit is found all the same)."""
    blobs = _blobs(repository)
    for oid, content in _contents(repository, list(blobs)):
        if b"\x00" in content[:BINARY_SNIFF]:
            continue
        found = list(find_keys([content]))
        if not found:
            continue
        commit, path = _introduced(repository, oid)
        for line, key, text in found:
            yield Found(path or blobs[oid] or f"blob {oid[:12]}", line, key, text, commit)
