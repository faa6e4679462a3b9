"""Find well-formed keys (shape and checksum) in bytes, files, directory trees and git history."""

from __future__ import annotations

import codecs
import itertools
import os
import re
import stat
import subprocess
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, BinaryIO

from apikey_tui import keyformat
from apikey_tui.keyformat import MalformedKey, ParsedKey

# The regular expression comes from the key format; bytes, so a file is never decoded. CPython's
# engine searches the literal prefix first, which is what makes this fast (>1 GB/s on text).
PATTERN = re.compile(keyformat.KEY_PATTERN.encode("ascii"))
CHUNK = 8 * 1024 * 1024  # bytes read at a time: memory stays bounded whatever the file's size
# As git and grep judge: a NUL in the first 8000 bytes makes a file binary, and it is skipped.
BINARY_SNIFF = 8000
_UTF16_MARKS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)  # but these open text (`_text`)
# Shorter than a key, so a key that straddles two chunks is found exactly once.
_OVERLAP = keyformat.KEY_LENGTH - 1
# Blobs whose first commit one `git log` looks for: ~55 bytes of arguments each, far below
# any system's limit on a command line.
INTRODUCED_BATCH = 1000


class ScanError(Exception):
    """A path or repository cannot be scanned (the message names it, never file content)."""


@dataclass(frozen=True)
class Found:
    """A well-formed key and where: path and line; in git history the commit, or for a key in a
    commit or tag object itself, the commit or tag with no path. The key itself (parts and
    text) never shows in a repr."""

    path: str | None
    line: int
    key: ParsedKey = field(repr=False)
    text: str = field(repr=False)
    commit: str | None = None
    tag: str | None = None

    @property
    def where(self) -> str:
        """`path:line`; in git history `commit:path:line` (commit shortened to 12), and for a
        commit or tag object `commit <commit>:line` or `tag <name>:line`."""
        if self.tag is not None:
            return f"tag {self.tag}:{self.line}"
        if self.path is None:
            return f"commit {(self.commit or '?')[:12]}:{self.line}"
        place = f"{self.path}:{self.line}"
        return f"{self.commit[:12]}:{place}" if self.commit else place


def find_keys(chunks: Iterable[bytes]) -> Iterator[tuple[int, ParsedKey, str]]:
    """(line, key, text) of every well-formed key in a stream of byte chunks, in order.

    Linear in the input: lines are counted once, from one key to the next. A key is found
    wherever it starts, even inside a candidate whose checksum failed (a decoy glued in front).
    """
    tail = b""
    lines_before = 0  # newlines before the buffer's start
    for chunk in chunks:
        buffer = tail + chunk if tail else chunk
        line, counted = lines_before + 1, 0  # the line holding buffer[counted]
        position = 0
        while (match := PATTERN.search(buffer, position)) is not None:
            start = match.start()
            # The next search starts one byte on, not at the match's end: a candidate that
            # fails its checksum (or a key) may hold the start of a key in its last characters.
            position = start + 1
            text = match.group().decode("ascii")
            try:
                parsed = keyformat.parse(text)
            except MalformedKey:
                continue  # the shape, not the checksum: about one string in 4 billion passes
            line += buffer.count(b"\n", counted, start)
            counted = start
            yield line, parsed, text
        # A key starts before len - _OVERLAP only if it ends in this buffer: found once, here.
        keep = min(_OVERLAP, len(buffer))
        lines_before += buffer.count(b"\n", 0, len(buffer) - keep)
        tail = buffer[len(buffer) - keep :]


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    while chunk := handle.read(CHUNK):
        yield chunk


def _text(chunks: Iterator[bytes], *, skip_binary: bool) -> Iterator[bytes]:
    """The chunks to search: UTF-16 (a byte-order mark first) as UTF-8, so its keys are found
    (Windows PowerShell 5's `>` writes UTF-16, whose NULs would make it binary); with
    skip_binary nothing for anything else with a NUL in its first BINARY_SNIFF bytes."""
    first = next(chunks, b"")
    if first.startswith(_UTF16_MARKS):
        decoder = codecs.getincrementaldecoder("utf-16")("replace")
        for chunk in itertools.chain([first], chunks):
            yield decoder.decode(chunk).encode("utf-8")
        yield decoder.decode(b"", final=True).encode("utf-8")
    elif not (skip_binary and b"\x00" in first[:BINARY_SNIFF]):
        yield first
        yield from chunks


def scan_stream(handle: BinaryIO, path: str = "-") -> Iterator[Found]:
    """Keys in a stream read to its end (standard input: binary or not, it is scanned)."""
    for line, key, text in find_keys(_text(_chunks(handle), skip_binary=False)):
        yield Found(path, line, key, text)


def scan_file(path: str, *, named: bool = True) -> Iterator[Found]:
    """Keys in one file; ScanError if it cannot be opened or read.

    A regular file with a NUL in its first BINARY_SNIFF bytes is binary and yields nothing,
    unless it is UTF-16 with a byte-order mark (`_text`). A
    path the user named is read whatever it is: a pipe (`/dev/stdin`, `<(git diff)`) or a
    device is read to its end like standard input. A file found inside a tree (named=False)
    is opened without following a symlink at the last step (O_NOFOLLOW), so one swapped for a
    link after the folder was listed is not read through it, and is never read if it turned
    into a FIFO or device meanwhile (it could block or never end).
    """
    # O_NONBLOCK: opening a FIFO never waits for a writer; a named one is read blocking below.
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    if not named:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as exc:
        raise ScanError(f"cannot read {path}: {exc.strerror}") from None
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        try:
            regular = stat.S_ISREG(os.fstat(descriptor).st_mode)
            if not regular:
                if not named:
                    return
                os.set_blocking(descriptor, True)  # else an empty pipe reads as EAGAIN
            for line, key, text in find_keys(_text(_chunks(handle), skip_binary=regular)):
                yield Found(path, line, key, text)
        except OSError as exc:
            raise ScanError(f"cannot read {path}: {exc.strerror}") from None


def walk(root: str, on_error: Callable[[ScanError], None]) -> Iterator[str]:
    """Regular files under root in name order (depth first), following no symlink (file or
    directory) and skipping `.git` directories (history is `scan_git`'s).

    A folder that cannot be listed goes to on_error and the walk goes on. A stack, not
    recursion: a tree of any depth is walked (1,500 levels hit Python's recursion limit).
    """
    pending: list[Iterator[os.DirEntry[str]]] = []
    folder: str | None = root
    while True:
        if folder is not None:
            try:
                with os.scandir(folder) as listing:
                    entries = sorted(listing, key=lambda e: e.name)
            except OSError as exc:
                on_error(ScanError(f"cannot list {folder}: {exc.strerror}"))
            else:
                pending.append(iter(entries))
            folder = None
        if not pending:
            return
        entry = next(pending[-1], None)
        if entry is None:
            pending.pop()
            continue
        try:
            if entry.is_symlink():
                continue  # inside the tree a link's target is scanned where it lives, or not at all
            if entry.is_dir(follow_symlinks=False):
                if entry.name != ".git":
                    folder = entry.path
            elif entry.is_file(follow_symlinks=False):
                yield entry.path
        except OSError as exc:
            on_error(ScanError(f"cannot read {entry.path}: {exc.strerror}"))


def scan_paths(paths: Iterable[str], on_error: Callable[[ScanError], None]) -> Iterator[Found]:
    """Keys in files and directory trees; a path named here is followed even if it is a link.

    Every path is checked first: one that does not exist raises ScanError (a usage error) before
    anything is scanned. Then whatever cannot be read (a file, a folder that cannot be listed)
    goes to on_error and the scan goes on with the rest.
    """
    paths = list(paths)
    for path in paths:
        try:
            os.stat(path)
        except FileNotFoundError:
            raise ScanError(f"no such file or directory: {path}") from None
        except OSError:
            pass  # there, but not to be read: on_error says so below
    for path in paths:
        if os.path.isdir(path):
            for inner in walk(path, on_error):
                try:
                    yield from scan_file(inner, named=False)
                except ScanError as exc:
                    on_error(exc)
        else:
            try:
                yield from scan_file(path)
            except ScanError as exc:
                on_error(exc)


# --- git history --------------------------------------------------------------------------------


# A repository's own config is the scanned repository's to write, and git obeys it: a
# promisor remote's `ext::` URL (with protocol.ext.allow) is a command a lazy fetch of a
# missing object runs, as is the gpg.program that log.showSignature runs on a signed commit.
# No transport is allowed at all (GIT_ALLOW_PROTOCOL empty overrides every protocol.*.allow;
# git 2.45+ also honours GIT_NO_LAZY_FETCH), and the log is asked for no signature. History
# is read as it is: replace refs and grafts (info/grafts) would each hide a commit, and the key
# it added, from the walk, while a clone or a push carries neither and shows it.
_GIT_ENV = {
    "GIT_ALLOW_PROTOCOL": "",
    "GIT_NO_LAZY_FETCH": "1",
    "GIT_NO_REPLACE_OBJECTS": "1",
    "GIT_GRAFT_FILE": os.devnull,
}


def _git_command(repository: str, *arguments: str) -> list[str]:
    return ["git", "-C", repository, *arguments]


def _git(repository: str, *arguments: str) -> list[str]:
    try:
        done = subprocess.run(
            _git_command(repository, *arguments),
            capture_output=True,
            check=False,
            timeout=3600,
            env={**os.environ, **_GIT_ENV},
        )
    except OSError as exc:
        raise ScanError(f"cannot run git: {exc.strerror}") from None
    if done.returncode != 0:
        message = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise ScanError(f"git failed in {repository}: {message[-1] if message else 'error'}")
    return done.stdout.decode("utf-8", "surrogateescape").splitlines()


def _objects(repository: str) -> tuple[list[tuple[str, str]], list[str]]:
    """Every commit, annotated tag and blob reachable from any ref (removed files included),
    each with the name rev-list gives it: a path for a blob, the tag's name, '' for a commit;
    and the objects git does not have (a partial clone's), which it is not to fetch."""
    objects, missing = [], []
    # The filter drops trees only: commits and tags are listed, a tag with its name, so a name
    # never tells a blob (`git cat-file` tells each object's type). --missing=print lists what
    # git lacks as "?<oid>" where it would fetch each one from the promisor remote in turn.
    for row in _git(
        repository, "rev-list", "--objects", "--all", "--filter=object:type=blob", "--missing=print"
    ):
        if row.startswith("?"):
            missing.append(row[1:])
            continue
        oid, _, name = row.partition(" ")
        objects.append((oid, name))
    return objects, missing


def _missing(oid: str) -> ScanError:
    return ScanError(f"git has no object {oid} (a partial clone?)")


class _Content:
    """One object's content on `git cat-file --batch`'s output, read CHUNK bytes at a time: a
    blob can be any size (a 1 GB one packs into 1 MB), so it is never held whole."""

    def __init__(self, stream: IO[bytes], size: int) -> None:
        self.stream = stream
        self.left = size

    def chunks(self) -> Iterator[bytes]:
        while self.left > 0:
            chunk = self.stream.read(min(CHUNK, self.left))
            if not chunk:
                return  # git ended: the next header says so
            self.left -= len(chunk)
            yield chunk

    def skip_rest(self) -> None:
        """Read past what the reader left unread, and the newline after the content."""
        for _ in self.chunks():
            pass
        self.stream.read(1)


def _contents(
    repository: str, oids: list[str], on_error: Callable[[ScanError], None]
) -> Iterator[tuple[str, str, Iterator[bytes]]]:
    """(oid, type, content in chunks) of each object, streamed from one `git cat-file --batch`;
    the chunks are valid until the next object is asked for. An object git does not have (a
    partial clone) goes to on_error."""
    process = subprocess.Popen(
        _git_command(repository, "cat-file", "--batch"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **_GIT_ENV},
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
            if len(header) == 2 and header[1] == b"missing":
                on_error(_missing(oid))
                continue
            if len(header) != 3 or not header[2].isdigit():
                on_error(ScanError(f"git cat-file stopped at {oid}: the rest was not scanned"))
                return
            content = _Content(process.stdout, int(header[2]))
            yield oid, header[1].decode("ascii", "replace"), content.chunks()
            content.skip_rest()
    finally:
        process.kill()
        process.wait()
        writer.join(timeout=5)
        for pipe in (requests, process.stdout):
            try:
                pipe.close()  # the writer leaves its end open when git ended first
            except OSError:
                pass


def _introduced(repository: str, oids: list[str]) -> dict[str, tuple[str, str]]:
    """The first commit (any ref) that added each blob, and its path there (absent: none did).

    One `git log` walks the whole history for up to INTRODUCED_BATCH blobs at once (git takes
    --find-object many times): one walk per blob made a scan quadratic in a history whose
    versions of a file each hold a key.
    """
    first: dict[str, tuple[str, str]] = {}
    for start in range(0, len(oids), INTRODUCED_BATCH):
        batch = oids[start : start + INTRODUCED_BATCH]
        wanted = set(batch)
        commit: str | None = None
        for row in _git(
            repository, "log", "--all", "--reverse", "-m", "--no-renames", "--raw", "--no-abbrev",
            "--no-show-signature", "--format=commit %H", *(f"--find-object={oid}" for oid in batch),
        ):  # fmt: skip
            if row.startswith("commit "):
                commit = row.split()[1]
            elif row.startswith(":") and commit is not None:
                fields, _, path = row.partition("\t")
                oid = fields.split()[3]
                if oid in wanted and oid not in first:
                    first[oid] = (commit, path)
    return first


def scan_git(repository: str, on_error: Callable[[ScanError], None]) -> Iterator[Found]:
    """Keys in every blob in the history of every ref, and in every commit and annotated tag
    (message, author, tagger: the whole object as `git cat-file -p` shows it).

    A key in a blob is placed at the commit that added it (a key deleted by a later commit is
    found all the same). ScanError if git cannot list the history (not a repository).
    """
    objects, missing = _objects(repository)
    for oid in missing:
        on_error(_missing(oid))
    names = dict(objects)
    # In object order; a blob's keys (by its id) wait for where they were added, which is
    # asked of git once for all such blobs at the end.
    found: list[Found | str] = []
    in_blobs: dict[str, list[tuple[int, ParsedKey, str]]] = {}
    for oid, kind, chunks in _contents(repository, [oid for oid, _ in objects], on_error):
        if kind == "commit":
            for line, key, text in find_keys(chunks):
                found.append(Found(None, line, key, text, commit=oid))
        elif kind == "tag":
            for line, key, text in find_keys(chunks):
                found.append(Found(None, line, key, text, tag=names[oid] or oid))
        elif kind == "blob":
            keys = list(find_keys(_text(chunks, skip_binary=True)))
            if keys:
                in_blobs[oid] = keys
                found.append(oid)
    introduced = _introduced(repository, list(in_blobs))
    for item in found:
        if isinstance(item, Found):
            yield item
            continue
        commit, path = introduced.get(item, (None, None))
        for line, key, text in in_blobs[item]:
            yield Found(path or names[item] or f"blob {item[:12]}", line, key, text, commit)
