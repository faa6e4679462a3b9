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

from sqlalchemy import Table, false, func, literal, literal_column, or_
from sqlalchemy import select as sa_select

from apikey_tui.db.models import OWNER_KINDS, OwnerRow
from apikey_tui.errors import InvalidInputError
from apikey_tui.store import states
from apikey_tui.store.metadata import check_tags
from apikey_tui.store.records import KEY_TABLE, SCOPE_TABLE

FIELDS = ("tag", "owner", "kind", "state", "scope")
# Bounds of one filter text: a person types a few terms; thousands would be a query SQLite
# refuses (its expression tree is at most 1,000 deep) and PostgreSQL spends its time on.
TEXT_MAX = 1000  # characters
TERMS_MAX = 32  # FIELD:VALUE terms
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
    joined by one space). The field's name and a kind's word are read in any case; a tag's
    name is lower-case by its grammar, so it is lowered too. InvalidInputError past the
    bounds (TEXT_MAX characters, TERMS_MAX terms): the store never builds that query."""
    if len(text) > TEXT_MAX:
        raise InvalidInputError(f"a filter is at most {TEXT_MAX} characters")
    free: list[str] = []
    values: dict[str, list[str]] = {}
    for word in text.split():
        name, sep, value = word.partition(":")
        name = name.lower()
        if sep and name in FIELDS:
            if name == "kind":
                value = value.lower()
            elif name == "tag":
                tag, eq, tag_value = value.partition("=")
                value = tag.lower() + eq + tag_value
            values.setdefault(name, []).append(value)
        else:
            free.append(word)
    if sum(map(len, values.values())) > TERMS_MAX:
        raise InvalidInputError(f"a filter holds at most {TERMS_MAX} FIELD:VALUE terms")
    return Terms(" ".join(free), {k: tuple(v) for k, v in values.items()})


def problem(terms: Terms) -> str | None:
    """What is wrong with a filter's terms, in one line, or None: a value no key can ever have
    (an empty one, a kind or state word that names none, a tag outside the tags' grammar).
    The store reads such a term as matching no key (the app, mid-word, shows no rows); the
    CLI refuses the text, so that a typo never reads as 'no keys'."""
    for name, values in terms.values.items():
        for value in values:
            if not value:
                return f"{name}: needs a value ({name}:{_EXAMPLES[name]})"
            if name == "kind" and value not in OWNER_KINDS:
                return f"kind:{value[:20]} is none of {', '.join(OWNER_KINDS)}"
            if name == "state" and not any(
                word.startswith(value.lower()) for words in states.WORDS.values() for word in words
            ):
                words = sorted({w for words in states.WORDS.values() for w in words})
                return f"state:{value[:20]} names no state: {', '.join(words)}"
            if name == "tag":
                tag, _eq, tag_value = value.partition("=")
                try:
                    check_tags([(tag, tag_value)])
                except InvalidInputError as exc:
                    return str(exc).removesuffix("; nothing was done")
    return None


_EXAMPLES = {
    "tag": "env=prod or tag:env",
    "owner": "payments",
    "kind": "team",
    "state": "disabled",
    "scope": "serving",
}


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
                # instr, not LIKE: SQLite's LIKE ignores case, and a tag's value keeps it
                # (`env=Prod` is not `env=prod`), as PostgreSQL's expression above does.
                spaced = literal(" ") + key.tags + literal(" ")
                found_at = func.instr(spaced, f" {word} " if "=" in value else f" {word}")
                alternatives.append(found_at > 0)
        found.append(or_(*alternatives) if alternatives else false())
    return found
