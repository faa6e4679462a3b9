"""`apikey-tui scan`: keys found in real files, standard input, git history and pre-commit."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tracemalloc
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy
import yaml
from sqlalchemy.engine import Engine

from apikey_tui import keyformat
from apikey_tui.cli import main
from apikey_tui.clock import system_clock
from apikey_tui.leaks.scan import find_keys
from apikey_tui.leaks.verdicts import mask, token_sha256
from apikey_tui.store import LEAK_EVENT, KeyStore, Leak
from apikey_tui.verifier import Verifier
from tests.conftest import ACTOR, CHEAP, FakeClock

ROOT = Path(__file__).resolve().parent.parent
CLI = Path(sys.executable).with_name("apikey-tui")
GIT_ENV = {
    "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.org", "GIT_CONFIG_NOSYSTEM": "1",
}  # fmt: skip


def new_key() -> str:
    return keyformat.generate()[1]


def scan(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["scan", *args])
    out, err = capsys.readouterr()
    return code, out, err


def git(folder: Path, *args: str, input: str | None = None) -> str:
    env = {**os.environ, **GIT_ENV, "HOME": str(folder)}
    done = subprocess.run(
        ["git", *args], cwd=folder, env=env, capture_output=True, text=True, check=True, input=input
    )
    return done.stdout


def test_offline_scan_finds_keys_in_a_tree_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An offline scan reports each key's file and line, masked, and exits 1; never the secret."""
    key = new_key()
    (tmp_path / "deep" / "er").mkdir(parents=True)
    (tmp_path / "deep" / "er" / "settings.py").write_text(f"# one\n# two\nKEY = '{key}'\n")
    (tmp_path / "notes.md").write_text(f"the key is {key} ok\n")
    code, out, err = scan(capsys, "--offline", str(tmp_path))
    assert code == 1
    public_id = keyformat.parse(key).public_id
    assert f"{tmp_path}/deep/er/settings.py:3: API key {mask(public_id)}" in out
    assert f"{tmp_path}/notes.md:1: API key {mask(public_id)}" in out
    secret = keyformat.parse(key).secret
    assert secret not in out + err and public_id not in out + err


def test_clean_tree_and_near_misses_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tree holding only a key with a broken checksum, a truncated key or none exits 0."""
    key = new_key()
    broken = key[:-1] + ("a" if key[-1] != "a" else "b")
    (tmp_path / "a.txt").write_text(f"{broken}\n{key[:-3]}\nnothing\n")
    code, out, _ = scan(capsys, "--offline", str(tmp_path))
    assert (code, out) == (0, "")


def test_symlinks_inside_the_tree_are_not_followed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key reachable only through a symlink (to a folder or file outside) is not scanned."""
    outside, tree = tmp_path / "outside", tmp_path / "tree"
    outside.mkdir()
    tree.mkdir()
    (outside / "secret.txt").write_text(new_key())
    (tree / "dir-link").symlink_to(outside)
    (tree / "file-link").symlink_to(outside / "secret.txt")
    (tree / "plain.txt").write_text("no key\n")
    assert scan(capsys, "--offline", str(tree))[0] == 0
    assert scan(capsys, "--offline", str(outside))[0] == 1  # the key is there to be found


def test_binary_files_are_skipped_but_stdin_is_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file with a NUL in its first 8000 bytes is skipped; the same bytes on stdin are read."""
    data = b"\x00\x01binary" + new_key().encode()
    (tmp_path / "blob.bin").write_bytes(data)
    assert scan(capsys, "--offline", str(tmp_path))[0] == 0
    done = subprocess.run([CLI, "scan", "--offline", "-"], input=data, capture_output=True)
    assert done.returncode == 1 and done.stdout.startswith(b"-:1: API key ak")


def test_utf16_text_with_a_byte_order_mark_is_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A UTF-16 file with a byte-order mark (Windows PowerShell 5's `>` writes them) is text:
    its key is found on its line in a tree, on standard input and in git history (its NULs
    made it binary and skipped: a clean exit 0 over a key)."""
    key = new_key()
    for number, encoding in enumerate(("utf-16-le", "utf-16-be")):
        text = f"first\r\nsecond\r\ntoken = {key}\r\n"
        bom = "\ufeff".encode(encoding)
        (tmp_path / f"key{number}.txt").write_bytes(bom + text.encode(encoding))
    code, out, _ = scan(capsys, "--offline", "--json", str(tmp_path))
    assert code == 1
    assert [(Path(r["path"]).name, r["line"]) for r in json.loads(out)] == [
        ("key0.txt", 3),
        ("key1.txt", 3),
    ]
    done = subprocess.run(
        [CLI, "scan", "--offline", "-"],
        input=(tmp_path / "key0.txt").read_bytes(),
        capture_output=True,
    )
    assert done.returncode == 1 and done.stdout.startswith(b"-:3: API key")
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "add", ".")
    git(tmp_path, "commit", "-qm", "keys in UTF-16")
    code, out, _ = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
    assert code == 1 and sorted(r["line"] for r in json.loads(out)) == [3, 3]


def test_a_key_across_chunk_boundaries_is_found_once_on_its_line() -> None:
    """find_keys finds a key split over two chunks once, with the line counted across chunks."""
    key = new_key()
    text = ("x\n" * 1000 + key + "\n" + "y\n" * 10 + key).encode()
    for cut in (1990, 2000, 2010, 2040, 2070, len(text) - 5):
        found = list(find_keys([text[:cut], text[cut:]]))
        assert [(line, found_text) for line, _, found_text in found] == [
            (1001, key),
            (1012, key),
        ]


def test_a_key_behind_a_glued_decoy_is_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key right after a 60-character decoy (a candidate whose checksum fails and whose tail
    is the key's first characters) is still found, in a file and in one chunk."""
    key = new_key()
    decoy = "ak" + "b" * 16 + "." + "c" * 41  # with the key's first 18, the shape of a key
    candidate = (decoy + key)[: keyformat.KEY_LENGTH]
    with pytest.raises(keyformat.MalformedKey):
        keyformat.parse(candidate)
    assert [text for _, _, text in find_keys([f"x {decoy}{key} y".encode()])] == [key]
    (tmp_path / "glued.txt").write_text(f"\n{decoy}{key}\n")
    code, out, _ = scan(capsys, "--offline", str(tmp_path))
    assert code == 1 and f"{tmp_path}/glued.txt:2: API key" in out


class _CountedBytes(bytes):
    """Bytes that add up how many bytes their count() calls span (how much line counting reads)."""

    spanned = 0

    def count(self, sub: Any, start: Any = None, end: Any = None) -> int:
        first = 0 if start is None else start
        last = len(self) if end is None else end
        _CountedBytes.spanned += max(0, last - first)
        return super().count(sub, start, end)


def test_many_keys_in_one_file_get_their_lines_in_linear_work() -> None:
    """20,000 keys in one text each get their own line number, whole or in odd chunks, and
    counting lines reads the text a bounded number of times (it read it once per key)."""
    keys = [new_key() for _ in range(20_000)]
    expected, text, line = [], [], 0
    for n, key in enumerate(keys):
        line += n % 3 + 1  # 0 to 2 empty lines before each key
        expected.append((line, key))
        text.append("\n" * (n % 3) + f"k{n} = '{key}'\n")
    data = "".join(text).encode()
    _CountedBytes.spanned = 0
    found = list(find_keys([_CountedBytes(data)]))
    assert [(line, found_text) for line, _, found_text in found] == expected
    assert _CountedBytes.spanned <= 2 * len(data)
    pieces = [data[i : i + 65_537] for i in range(0, len(data), 65_537)]
    assert [(line, found_text) for line, _, found_text in find_keys(pieces)] == expected


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing path, --disable with --offline, or stdin with --git are usage errors (2)."""
    assert scan(capsys, "--offline", str(tmp_path / "missing"))[0] == 2
    assert scan(capsys, "--offline", "--disable", str(tmp_path))[0] == 2
    assert scan(capsys, "--offline", "--git", "-")[0] == 2
    assert scan(capsys, "--offline", "--git", str(tmp_path))[0] == 2  # not a repository


def test_unreadable_file_fails_closed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A part the scan cannot read makes an otherwise clean scan exit 2, naming the problem."""
    (tmp_path / "clean.txt").write_text("nothing\n")
    _beyond_path_max(tmp_path)
    code, _, err = scan(capsys, "--offline", str(tmp_path))
    assert code == 2 and "File name too long" in err


def _beyond_path_max(folder: Path) -> None:
    """Make folder/d...d/d...d/... deeper than PATH_MAX, which even root cannot list by name."""
    handle = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(20):  # 20 x 250 characters: longer than PATH_MAX (4096)
            os.mkdir("d" * 250, dir_fd=handle)
            inner = os.open("d" * 250, os.O_RDONLY | os.O_DIRECTORY, dir_fd=handle)
            os.close(handle)
            handle = inner
        os.close(os.open("deep.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=handle))
    finally:
        os.close(handle)


def test_an_unlistable_folder_leaves_the_rest_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Keys before and after a folder that cannot be listed are reported, the folder is named on
    stderr, and a live key found still exits 1 (the folder aborted the scan: exit 2, no key)."""
    first, last = new_key(), new_key()
    (tmp_path / "0.txt").write_text(first)
    (tmp_path / "m").mkdir()
    _beyond_path_max(tmp_path / "m")
    (tmp_path / "z.txt").write_text(f"\n{last}")
    code, out, err = scan(capsys, "--offline", str(tmp_path))
    assert code == 1
    assert f"{tmp_path}/0.txt:1: API key" in out and f"{tmp_path}/z.txt:2: API key" in out
    assert "cannot list" in err and "File name too long" in err


def test_a_tree_1500_folders_deep_is_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key 1,500 folders down is found (the walk recursed: an internal error with exit 1)."""
    handle = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(1500):
            os.mkdir("d", dir_fd=handle)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=handle)
            os.close(handle)
            handle = inner
        deep = os.open("key.txt", os.O_WRONLY | os.O_CREAT, 0o600, dir_fd=handle)
        os.write(deep, new_key().encode())
        os.close(deep)
    finally:
        os.close(handle)
    try:
        code, out, err = scan(capsys, "--offline", str(tmp_path))
        assert (code, err.count("internal error")) == (1, 0)
        assert out.startswith(f"{tmp_path}/{'d/' * 1500}key.txt:1: API key")
    finally:  # bottom up: Python 3.11's rmtree (pytest's clean-up) recurses, and would fail
        os.unlink(f"{tmp_path}/{'d/' * 1500}key.txt")
        for depth in range(1500, 0, -1):
            os.rmdir(f"{tmp_path}/{'d/' * depth}")


def test_an_internal_error_in_scan_exits_2_never_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug inside scan is one line and exit 2: for scan, exit 1 means a live key was found."""

    def broken(chunks: Any) -> Any:
        raise RuntimeError("the message of the bug")

    monkeypatch.setattr("apikey_tui.leaks.scan.find_keys", broken)
    (tmp_path / "a.txt").write_text("text\n")
    code, out, err = scan(capsys, "--offline", str(tmp_path))
    assert (code, out) == (2, "")
    assert "internal error (RuntimeError" in err and "message of the bug" not in err


def test_dev_stdin_from_a_pipe_is_read() -> None:
    """`scan /dev/stdin` reads a pipe like `scan -` (it was skipped as a FIFO: exit 0 unread)."""
    done = subprocess.run(
        [CLI, "scan", "--offline", "/dev/stdin"], input=new_key().encode(), capture_output=True
    )
    assert done.returncode == 1 and done.stdout.startswith(b"/dev/stdin:1: API key ak")


def test_git_history_finds_a_key_removed_by_the_next_commit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A key committed and then deleted is clean in the tree, found by --git at its commit."""
    key = new_key()
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "config.py").write_text(f"import os\nTOKEN = '{key}'\n")
    git(tmp_path, "add", "config.py")
    git(tmp_path, "commit", "-qm", "add config")
    added = git(tmp_path, "rev-parse", "HEAD").strip()
    (tmp_path / "config.py").write_text("import os\nTOKEN = os.environ['TOKEN']\n")
    git(tmp_path, "commit", "-qam", "read the token from the environment")
    assert scan(capsys, "--offline", str(tmp_path))[0] == 0
    code, out, _ = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
    [found] = json.loads(out)
    assert code == 1
    assert (found["commit"], found["path"], found["line"]) == (added, "config.py", 2)
    assert found["where"] == f"{added[:12]}:config.py:2"


def test_git_history_places_many_keys_with_one_walk_of_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys in 30 versions of a file are each placed at the commit that added them, from one
    `git log` (one walk of the whole history per key-bearing blob made a scan quadratic)."""
    git(tmp_path, "init", "-q", "-b", "main")
    added = {}
    for number in range(30):
        key = new_key()
        (tmp_path / "f.txt").write_text(f"version {number}\n{key}\n")
        git(tmp_path, "add", "f.txt")
        git(tmp_path, "commit", "-qm", f"v{number}")
        added[token_sha256(key)] = git(tmp_path, "rev-parse", "HEAD").strip()
    logs = []
    run = subprocess.run

    def counting(command: list[str], *args: Any, **kwargs: Any) -> Any:
        logs.extend(command[3:4] if command[3:4] == ["log"] else [])
        return run(command, *args, **kwargs)

    monkeypatch.setattr("apikey_tui.leaks.scan.subprocess.run", counting)
    code, out, _ = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
    rows = json.loads(out)
    assert code == 1 and len(rows) == 30
    assert {row["token_sha256"]: row["commit"] for row in rows} == added
    assert {(row["path"], row["line"]) for row in rows} == {("f.txt", 2)}
    assert len(logs) == 1


def test_git_history_reads_a_large_blob_in_chunks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A blob 64 times the read size is scanned in chunks, its key found on its line: it was
    read whole, twice over, so a repository of 1 MB holding a 1 GB blob took 2 GB."""
    key = new_key()
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "big.txt").write_text("filler line\n" * (4 * 1024 * 1024 // 12) + key + "\n")
    git(tmp_path, "add", "big.txt")
    git(tmp_path, "commit", "-qm", "big")
    lines = (tmp_path / "big.txt").read_text().count("\n")
    monkeypatch.setattr("apikey_tui.leaks.scan.CHUNK", 64 * 1024)
    tracemalloc.start()
    try:
        code, out, _ = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    [row] = json.loads(out)
    assert code == 1 and (row["path"], row["line"]) == ("big.txt", lines)
    assert peak < 2 * 1024 * 1024


def test_git_history_runs_nothing_a_repositorys_config_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """scan --git of a repository whose own config names programs (a gpg.program that
    log.showSignature runs, an ext:: promisor remote a lazy fetch runs) runs none of them,
    finds the key, and names the object git lacks instead of fetching it."""
    ran = tmp_path / "ran"
    program = tmp_path / "program.sh"
    program.write_text(f"#!/bin/sh\ntouch {ran}\nexit 1\n")
    program.chmod(0o755)
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "gone.txt").write_text("fetched lazily\n")
    git(repo, "add", "gone.txt")
    git(repo, "commit", "-qm", "a blob that will be missing")
    gone = git(repo, "rev-parse", "HEAD:gone.txt").strip()
    (repo / ".git" / "objects" / gone[:2] / gone[2:]).unlink()
    key = new_key()
    blob = git(repo, "hash-object", "-w", "--stdin", input=f"{key}\n").strip()
    tree = git(repo, "mktree", input=f"100644 blob {blob}\tkey.txt\n").strip()
    signed = (
        f"tree {tree}\nparent {git(repo, 'rev-parse', 'HEAD').strip()}\n"
        "author t <t@example.org> 1700000000 +0000\ncommitter t <t@example.org> 1700000000 +0000\n"
        "gpgsig -----BEGIN PGP SIGNATURE-----\n \n AAAA\n -----END PGP SIGNATURE-----\n\nsigned\n"
    )
    commit = git(repo, "hash-object", "-t", "commit", "-w", "--stdin", input=signed).strip()
    git(repo, "update-ref", "refs/heads/main", commit)
    for name, value in {
        "log.showSignature": "true",
        "gpg.program": str(program),
        "core.repositoryformatversion": "1",
        "extensions.partialClone": "origin",
        "remote.origin.promisor": "true",
        "remote.origin.url": f"ext::{program}",
        "protocol.ext.allow": "always",
    }.items():
        git(repo, "config", name, value)
    code, out, err = scan(capsys, "--offline", "--git", "--json", str(repo))
    assert not ran.exists()
    [row] = json.loads(out)
    assert code == 1 and (row["commit"], row["path"]) == (commit, "key.txt")
    assert f"git has no object {gone}" in err


def test_git_history_ignores_replace_refs_and_grafts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A commit that added a key and was then hidden behind a replace ref or a graft (which
    git follows by default, and a clone or a push leaves behind) is still scanned: --git
    passed such a history as clean (exit 0)."""
    key = new_key()
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("base\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-qm", "base")
    (tmp_path / "secret.txt").write_text(f"{key}\n")
    git(tmp_path, "add", "secret.txt")
    git(tmp_path, "commit", "-qm", "add a key")
    added = git(tmp_path, "rev-parse", "HEAD").strip()
    git(tmp_path, "rm", "-q", "secret.txt")
    git(tmp_path, "commit", "-qm", "remove it")
    tree = git(tmp_path, "rev-parse", "HEAD~2^{tree}").strip()
    clean = git(tmp_path, "commit-tree", "-p", "HEAD~2", "-m", "add a key", tree).strip()
    git(tmp_path, "replace", added, clean)
    code, out, _ = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
    assert code == 1 and [r["commit"] for r in json.loads(out)] == [added]
    git(tmp_path, "replace", "-d", added)
    head, base = (git(tmp_path, "rev-parse", r).strip() for r in ("HEAD", "HEAD~2"))
    (tmp_path / ".git" / "info" / "grafts").write_text(f"{head} {base}\n")
    code, out, _ = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
    assert code == 1 and [r["commit"] for r in json.loads(out)] == [added]


def test_git_history_covers_every_ref(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A key only on another branch is found by --git run on the main branch."""
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text("a\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-qm", "a")
    git(tmp_path, "checkout", "-qb", "feature")
    (tmp_path / "b.txt").write_text(new_key())
    git(tmp_path, "add", "b.txt")
    git(tmp_path, "commit", "-qm", "b")
    git(tmp_path, "checkout", "-q", "main")
    code, out, _ = scan(capsys, "--offline", "--git", str(tmp_path))
    assert code == 1 and ":b.txt:1: API key" in out


def test_git_history_with_annotated_tags_scans_blobs_and_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A repository with annotated tags (one of a tag, one of a blob) and two branches is
    scanned whole: a key in a file on each branch, only in a commit message, only in a tag
    message and in a tagged blob are each found once (tag objects were taken for blobs: exit
    2, nothing reported)."""
    in_main, in_feature, in_commit, in_tag, in_blob = (new_key() for _ in range(5))
    git(tmp_path, "init", "-q", "-b", "main")
    (tmp_path / "a.txt").write_text(f"main\n{in_main}\n")
    git(tmp_path, "add", "a.txt")
    git(tmp_path, "commit", "-qm", "add a")
    git(tmp_path, "tag", "-a", "v1", "-m", "release 1")
    git(tmp_path, "tag", "-a", "v1-again", "v1", "-m", "a tag of a tag")
    git(tmp_path, "checkout", "-qb", "feature")
    (tmp_path / "b.txt").write_text(in_feature)
    git(tmp_path, "add", "b.txt")
    git(tmp_path, "commit", "-qm", f"add b\n\nthe token was {in_commit}, oops")
    in_commit_at = git(tmp_path, "rev-parse", "HEAD").strip()
    git(tmp_path, "tag", "-a", "v2", "-m", f"release 2\n\n{in_tag}")
    blob = git(tmp_path, "hash-object", "-w", "--stdin", input=f"loose\n{in_blob}\n").strip()
    git(tmp_path, "tag", "-a", "blob-tag", blob, "-m", "a tag of a blob")
    git(tmp_path, "checkout", "-q", "main")
    code, out, err = scan(capsys, "--offline", "--git", "--json", str(tmp_path))
    assert code == 1, err
    rows = {row["token_sha256"]: row for row in json.loads(out)}
    assert len(rows) == 5 and len(json.loads(out)) == 5
    by_key = {key: rows[token_sha256(key)] for key in (in_main, in_feature, in_commit, in_tag)}
    assert (by_key[in_main]["path"], by_key[in_main]["line"]) == ("a.txt", 2)
    assert (by_key[in_feature]["path"], by_key[in_feature]["line"]) == ("b.txt", 1)
    commit_row = by_key[in_commit]
    assert (commit_row["path"], commit_row["commit"], commit_row["tag"]) == (
        None,
        in_commit_at,
        None,
    )
    message_line = (
        git(tmp_path, "cat-file", "-p", in_commit_at)
        .splitlines()
        .index(f"the token was {in_commit}, oops")
    )
    assert commit_row["where"] == f"commit {in_commit_at[:12]}:{message_line + 1}"
    tag_row = by_key[in_tag]
    assert (tag_row["path"], tag_row["commit"], tag_row["tag"]) == (None, None, "v2")
    assert tag_row["where"].startswith("tag v2:")
    assert rows[token_sha256(in_blob)]["line"] == 2
    for key in (in_main, in_feature, in_commit, in_tag, in_blob):
        assert keyformat.parse(key).secret not in out + err


# --- with the database -------------------------------------------------------------------------


@pytest.fixture
def keys_file(tmp_path: Path, database_url: str) -> tuple[Path, dict[str, str]]:
    """A file holding a live, a disabled, an expired, a deleted, a forged and an unknown key."""
    store = KeyStore.open(database_url, hasher=CHEAP, actor=ACTOR)
    past = KeyStore(store.engine, hasher=CHEAP, actor=ACTOR, clock=FakeClock(system_clock()))
    try:
        made = {
            name: store.create_key("alice", name, ["project"]).plaintext
            for name in ("live", "disabled", "deleted")
        }
        assert isinstance(past.clock, FakeClock)
        past.clock.advance(-timedelta(days=3))
        expired = past.create_key("alice", "expired", ["project"], expires=timedelta(days=1))
        made["expired"] = expired.plaintext
        store.disable_key("alice", "disabled", "rotated out")
        store.delete_key("alice", "deleted")
        public_id = keyformat.parse(made["live"]).public_id
        made["forged"] = keyformat.generate(public_id)[1]
        made["unknown"] = new_key()
    finally:
        store.close()
    lines = [f"{name} = '{key}'" for name, key in made.items()]
    path = tmp_path / "leaky.env"
    path.write_text("\n".join(lines) + "\n")
    return path, made


def test_database_scan_tells_each_state_and_exits_1_for_live(
    keys_file: tuple[Path, dict[str, str]], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each key's state, owner and name are reported; a forged one is never called live."""
    path, made = keys_file
    code, out, err = scan(capsys, "--database-url", database_url, "--json", str(path))
    assert code == 1
    states = {row["line"]: (row["state"], row["owner"], row["name"]) for row in json.loads(out)}
    assert states == {
        1: ("live", "alice", "live"),
        2: ("disabled", "alice", "disabled"),
        3: ("deleted", None, None),
        4: ("expired", "alice", "expired"),
        5: ("forged", "alice", "live"),
        6: ("unknown", None, None),
    }
    for key in made.values():
        assert keyformat.parse(key).secret not in out + err


def test_database_scan_reads_the_audit_trail_once_for_many_unknown_keys(
    keys_file: tuple[Path, dict[str, str]], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Telling deleted keys from unknown ones reads the audit trail once for 50 unknown keys as
    for one (a read per key, each a scan of the whole trail, made a scan quadratic)."""
    path, _ = keys_file
    reads: list[str] = []

    def count(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "apikey_tui_event" in statement:
            reads.append(statement)

    sqlalchemy.event.listen(Engine, "before_cursor_execute", count)
    try:
        scan(capsys, "--database-url", database_url, str(path))
        alone = len(reads)
        with path.open("a") as more:
            more.writelines(f"{new_key()}\n" for _ in range(50))
        _, out, _ = scan(capsys, "--database-url", database_url, "--json", str(path))
    finally:
        sqlalchemy.event.remove(Engine, "before_cursor_execute", count)
    assert len(reads) == 2 * alone
    states = [row["state"] for row in json.loads(out)]
    assert states.count("unknown") == 51 and states.count("deleted") == 1


def test_database_scan_without_live_keys_exits_0(
    keys_file: tuple[Path, dict[str, str]], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Only refused, forged or foreign keys found: exit 0 (they work nowhere)."""
    path, made = keys_file
    path.write_text("\n".join(v for k, v in made.items() if k != "live"))
    assert scan(capsys, "--database-url", database_url, str(path))[0] == 0


def test_disable_stops_the_live_key_with_reason_and_leak_event(
    keys_file: tuple[Path, dict[str, str]], database_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--disable disables the live key (reason 'leaked: <where>', a leak event that KeyStore.leaks
    reads back) and marks the disabled and expired keys found with their right secret leaked
    too (they were left as they were, so enable revived them); a verifier refuses the key, and
    the summary says what to do next."""
    path, made = keys_file
    code, out, err = scan(capsys, "--database-url", database_url, "--disable", str(path))
    assert code == 1 and f"{path}:1: live key" in out and "disabled" in out
    assert "found and disabled; recreate or rotate it, then enable it." in err
    store = KeyStore.open(database_url, hasher=CHEAP)
    try:
        info = store.get_key("alice", "live")
        assert info.disabled and info.leaked
        assert info.disabled_reason == f"leaked: {path}:1"
        # Its right secret was found too: marked leaked, so `keys enable` cannot revive it.
        disabled = store.get_key("alice", "disabled")
        assert disabled.disabled and disabled.leaked
        assert disabled.disabled_reason == f"leaked: {path}:2"
        expired = store.get_key("alice", "expired")
        assert expired.leaked and expired.disabled_reason == f"leaked: {path}:4"
        [leak] = store.leaks("alice", "live")
        assert (leak.source, leak.outcome, leak.where) == ("scan", "disabled", f"{path}:1")
        assert leak.public_id == info.public_id
        events = store.events(action=LEAK_EVENT)
        assert len(events) == 3  # live, disabled, expired
        assert leak in [Leak.from_event(event) for event in events]
    finally:
        store.close()
    verifier = Verifier.from_url(database_url, hasher=CHEAP)
    try:
        with pytest.raises(Exception, match="not valid"):
            verifier.verify(f"ApiKey {made['live']}")
    finally:
        verifier.close()


class _Terminal(io.StringIO):
    """A stream that says it is a terminal; as stdin it answers what it was given."""

    def isatty(self) -> bool:
        return True


def test_disable_in_a_terminal_says_where_before_asking_and_escapes_paths(
    keys_file: tuple[Path, dict[str, str]],
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In a terminal, --disable names each live key's place and owner/name before its question
    (it asked first, with the places only after), and a path with control characters is shown
    escaped there and in the findings; answering no disables nothing."""
    path, made = keys_file
    evil = path.parent / "evil\x1b]0;owned\x07"
    evil.mkdir()
    path.rename(evil / "leaky.env")
    out, err = _Terminal(), _Terminal()
    monkeypatch.setattr(sys, "stdin", _Terminal("n\n"))
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    assert main(["scan", "--database-url", database_url, "--disable", str(evil)]) == 1
    shown = str(evil / "leaky.env").replace("\x1b", "\\x1b").replace("\x07", "\\x07")
    asked = err.getvalue()
    assert f"  {shown}:1: alice/live (" in asked and f"  {shown}:2: alice/disabled (" in asked
    assert asked.index(f"{shown}:1") < asked.index("Disable them as leaked? [y/N]")
    assert "Cancelled: no key was disabled." in asked
    assert "\x1b" not in asked + out.getvalue() and f"{shown}:1: live key" in out.getvalue()
    store = KeyStore.open(database_url, hasher=CHEAP)
    try:
        assert not store.get_key("alice", "live").disabled
        assert not store.get_key("alice", "disabled").leaked
    finally:
        store.close()
    assert keyformat.parse(made["live"]).secret not in asked + out.getvalue()


def test_database_that_cannot_be_asked_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A scan with a key and no database at the URL exits 2 (never 0: nothing was checked)."""
    (tmp_path / "a.txt").write_text(new_key())
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    code, _, err = scan(capsys, "--database-url", url, str(tmp_path / "a.txt"))
    assert code == 2 and "no database" in err
    assert not (tmp_path / "missing.db").exists()


# --- pre-commit ---------------------------------------------------------------------------------


def test_pre_commit_hook_blocks_a_commit_with_a_key(tmp_path: Path) -> None:
    """The hook of .pre-commit-hooks.yaml, run by the real pre-commit, refuses a staged key and
    lets a clean commit through.

    It runs as a `repo: local` copy of the published hook with `language: system` (our
    installed apikey-tui), so the test needs no network: `language: python` would make
    pre-commit pip-install this package and its dependencies from PyPI first.
    """
    [hook] = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["language"] == "python" and hook["entry"].startswith("apikey-tui scan")
    local = {**hook, "language": "system"}
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    config = {"repos": [{"repo": "local", "hooks": [local]}]}
    (repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        **GIT_ENV,
        "HOME": str(repo),
        "PRE_COMMIT_HOME": str(tmp_path / "cache"),
        "PATH": f"{CLI.parent}{os.pathsep}{os.environ['PATH']}",
    }
    pre_commit = shutil.which("pre-commit", path=env["PATH"])
    assert pre_commit is not None
    subprocess.run([pre_commit, "install"], cwd=repo, env=env, check=True, capture_output=True)
    (repo / "app.py").write_text(f"API_KEY = '{new_key()}'\n")
    git(repo, "add", ".")
    blocked = subprocess.run(
        ["git", "commit", "-qm", "with a key"], cwd=repo, env=env, capture_output=True, text=True
    )
    assert blocked.returncode != 0 and "app.py:1: API key ak" in blocked.stdout + blocked.stderr
    assert git(repo, "rev-list", "--all") == ""  # nothing was committed
    (repo / "app.py").write_text("import os\nAPI_KEY = os.environ['API_KEY']\n")
    git(repo, "add", ".")
    subprocess.run(
        ["git", "commit", "-qm", "clean"], cwd=repo, env=env, check=True, capture_output=True
    )


def test_offline_scan_never_imports_the_database_layer(tmp_path: Path) -> None:
    """`scan --offline` (a pre-commit hook, run on every commit) imports no SQLAlchemy."""
    (tmp_path / "a.txt").write_text("clean\n")
    code = (
        "import sys\nfrom apikey_tui.cli import main\n"
        f"assert main(['scan', '--offline', {str(tmp_path)!r}]) == 0\n"
        "assert 'sqlalchemy' not in sys.modules, 'SQLAlchemy was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
