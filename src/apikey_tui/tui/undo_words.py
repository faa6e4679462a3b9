"""What an undo would undo, in words: the status lines' offer and the undo's question."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from apikey_tui.errors import InvalidInputError
from apikey_tui.limits.model import Limit
from apikey_tui.names import counted
from apikey_tui.store.metadata import check_tags, pairs_words
from apikey_tui.tui.times import absolute

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Batch, KeyInfo
    from apikey_tui.store.metadata import Pairs

# A batch's action as the change it made ('the expiry change of …', not 'the set expiry of …').
_CHANGE = {
    "set expiry": "expiry change",
    "set scopes": "scopes change",
    "set limits": "limits change",
    "set networks": "networks change",
    "set tags": "tags change",
    "set meta": "metadata change",
}


def undoable_words() -> str:
    """What the key views' u can undo, from the store's one list (`bulk.UNDOABLE`): 'disable,
    enable, …, tags or transfer'; an offboarding is undone in the Owners view."""
    from apikey_tui.store import UNDOABLE  # the store's bulk module: after the first paint

    words = sorted(
        _CHANGE.get(action, action).removesuffix(" change")
        for action in UNDOABLE
        if action != "offboard"
    )
    return f"{', '.join(words[:-1])} or {words[-1]}"


def change_of(batch: Batch) -> str:
    """'disable of ci-deploy of root', 'expiry change of 3 keys'."""
    what = _CHANGE.get(batch.action, batch.action)
    keys = batch.before
    whom = f"{keys[0].name} of {keys[0].owner}" if len(keys) == 1 else counted(len(keys))
    return f"{what} of {whom}"


def limits_words(limits: Sequence[Limit]) -> str:
    """'600/m 10000/d', or 'none'."""
    return " ".join(map(str, limits)) or "none"


def _expiry(moment: datetime | None) -> str:
    return "never" if moment is None else absolute(moment, seconds=True)


def comes_back(before: KeyInfo, now: KeyInfo) -> str:
    """What one key gets back, said against what it has now ('its scopes go back to …')."""
    parts = []
    if before.disabled != now.disabled:
        parts.append(
            "it is disabled again (with the same time and reason)"
            if before.disabled
            else "it is enabled again"
        )
    if before.expires_at != now.expires_at:
        parts.append(
            f"its expiry goes back to {_expiry(before.expires_at)} (now {_expiry(now.expires_at)})"
        )
    if before.scopes != now.scopes:
        parts.append(
            f"its scopes go back to {' '.join(before.scopes)} (now {' '.join(now.scopes)})"
        )
    if before.owner != now.owner:
        parts.append(f"it goes back to {before.owner} (now {now.owner})")
    if before.tags != now.tags:
        parts.append(
            f"its tags go back to {pairs_words(before.tags) or 'none'} "
            f"(now {pairs_words(now.tags) or 'none'})"
        )
    if before.limits != now.limits:
        parts.append(
            f"its limits go back to {limits_words(before.limits)} (now {limits_words(now.limits)})"
        )
    if before.networks != now.networks:
        parts.append(
            f"its networks go back to {networks_words(before)} (now {networks_words(now)})"
        )
    return "; ".join(parts) or "it gets back what it had (nothing differs)"


def parse_tags(text: str) -> Pairs:
    """Tags typed as `keys set-tags` takes them: KEY=VALUE words, or none (or blank)."""
    words = text.split()
    if [w.lower() for w in words] in ([], ["none"]):
        return ()
    pairs = []
    for word in words:
        name, sep, value = word.partition("=")
        if not sep:
            raise InvalidInputError(f"{word!r} is not KEY=VALUE")
        pairs.append((name, value))
    return check_tags(pairs)


def networks_words(key: KeyInfo) -> str:
    """'shadow: allow 10.0.0.0/8', or 'anywhere'."""
    return "anywhere" if key.networks is None else key.networks.summary(3)
