"""The filter's grammar: `tag:env=prod owner:payments kind:team state:disabled scope:serving`
and free text, one reading for the CLI's `--filter` and the app's filter (`queries.matching`).

Words of the form FIELD:VALUE with a known FIELD are terms; every other word is free text,
matched as before (owner, name, public id, a scope's name, a state's word or a network mode).
Terms of different fields must all hold; several of one field are alternatives (`owner:a
owner:b`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Table, false, literal, literal_column, or_
from sqlalchemy import select as sa_select

from apikey_tui.db.models import OWNER_KINDS, OwnerRow
from apikey_tui.store import states
from apikey_tui.store.records import KEY_TABLE, SCOPE_TABLE

FIELDS = ("tag", "owner", "kind", "state", "scope")
OWNER_TABLE: Table = OwnerRow.__table__  # type: ignore[attr-defined]


@dataclass(frozen=True)
class Terms:
    """A filter text read: each field's values (in the order given) and the free text."""

    free: str = ""
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.values)


def parse(text: str) -> Terms:
    """Read a filter text: FIELD:VALUE words for known fields, the rest free text (its words
    joined by one space)."""
    free: list[str] = []
    values: dict[str, list[str]] = {}
    for word in text.split():
        name, sep, value = word.partition(":")
        if sep and name.lower() in FIELDS:
            values.setdefault(name.lower(), []).append(value)
        else:
            free.append(word)
    return Terms(" ".join(free), {k: tuple(v) for k, v in values.items()})


def term_words(terms: Terms) -> list[list[str]]:
    """The words of the keys' terms index (`db.key_indexes.term_ids`) that the tag and scope
    terms look for, one list of alternatives per field: 'tag:env=prod', 'tag:env' (any
    value), 'scope:serving'."""
    fields = [[f"tag:{value}" for value in terms.values.get("tag", ())]]
    fields.append([f"scope:{value}" for value in terms.values.get("scope", ())])
    return [words for words in fields if words]


def _tag_word(value: str) -> str:
    tag, sep, tag_value = value.partition("=")
    return f"{tag}={tag_value}" if sep else f"{tag}="


def _escaped(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def conditions(
    terms: Terms, now: datetime, *, sqlite: bool = False, skip: Collection[str] = ()
) -> list[Any]:
    """WHERE terms of the fields (free text is `queries.matching`'s) but those in skip
    (answered elsewhere); a value no key can have (an unknown kind or state word) is a term no
    key meets.

    sqlite: a kind term reads the key's owner through a unary + there, which keeps SQLite off
    the owner index (without statistics it would read every team's keys through it, then
    sort: 1.2 s at a million keys, against 5 ms walking the table's order).
    """
    key = KEY_TABLE.c
    owner_column: Any = literal_column(f"+{KEY_TABLE.name}.owner") if sqlite else key.owner
    found: list[Any] = []
    for name, values in terms.values.items():
        if name in skip:
            continue
        alternatives: list[Any] = []
        for value in values:
            if name == "owner":
                alternatives.append(key.owner == value)
            elif name == "kind":
                if value in OWNER_KINDS:
                    alternatives.append(
                        owner_column.in_(
                            sa_select(OWNER_TABLE.c.owner).where(OWNER_TABLE.c.kind == value)
                        )
                    )
            elif name == "state":
                kinds = states.kinds_named(value)
                if kinds:
                    alternatives.append(states.kind_sql(kinds, now))
            elif name == "scope":
                alternatives.append(
                    sa_select(SCOPE_TABLE.c.key_id)
                    .where(SCOPE_TABLE.c.key_id == key.id, SCOPE_TABLE.c.scope == value)
                    .exists()
                )
            else:  # tag: NAME=VALUE exactly, or NAME (any value)
                # No index serves this text: the keys' terms index names the few keys a rare
                # tag is on (`queries.matching`); a common tag is met soon in the window's order.
                word = _tag_word(value)
                if not sqlite:
                    # A regular expression on the bare column, which PostgreSQL estimates from
                    # the column's statistics: it then walks the window's order for a common
                    # tag. Padded text it guesses a few dozen keys, and reads every key.
                    literal_word = "".join(c if c.isalnum() else "\\" + c for c in word)
                    end = "( |$)" if "=" in value else ""
                    alternatives.append(key.tags.regexp_match(f"(^| ){literal_word}{end}"))
                    continue
                escaped = _escaped(word)
                pattern = f"% {escaped} %" if "=" in value else f"% {escaped}%"
                spaced = literal(" ") + key.tags + literal(" ")
                alternatives.append(spaced.like(pattern, escape="\\"))
        found.append(or_(*alternatives) if alternatives else false())
    return found
