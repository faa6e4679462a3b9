"""One key in full: who made it, what it may reach, when it was used, and what happened to it."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.widgets import DataTable, Sparkline, Static

from apikey_tui.errors import KeyNotFoundError
from apikey_tui.names import counted, printable
from apikey_tui.networks import NetworkRules
from apikey_tui.store import KeyDetail, Leak, ScopeInfo, states
from apikey_tui.store.limit_use import LimitUses
from apikey_tui.store.metadata import pairs_words
from apikey_tui.store.network_use import NetworkUse
from apikey_tui.store.rightsizing import Proposal
from apikey_tui.store.types import DEFAULT_WINDOW
from apikey_tui.store.usage import KeyUsage
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.key_actions import DETAIL, bindings
from apikey_tui.tui.messages import KeyVanished
from apikey_tui.tui.screens.live import LiveScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import actor_text, clip, literal
from apikey_tui.tui.times import WINDOW, absolute, minute, relative, relative_and_absolute
from apikey_tui.tui.undo_words import change_of
from apikey_tui.tui.workers import Failure

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Event, KeyInfo, KeyStore
    from apikey_tui.store.limit_use import LimitUse

_LABEL = 13


class KeyRequests(Protocol):
    """What the key detail asks of the app's writes (tui.key_writes.KeyWrites), one typed call
    per action: one place asks, writes and offers undo, for the table and the detail alike."""

    def delete(self, key: KeyInfo) -> None: ...
    def recreate(self, key: KeyInfo) -> None: ...
    def rotate(self, key: KeyInfo) -> None: ...
    def end_grace(self, key: KeyInfo) -> None: ...
    def toggle_disabled(self, key: KeyInfo) -> None: ...
    def set_expiry(self, key: KeyInfo) -> None: ...
    def edit_scopes(self, key: KeyInfo, catalog: list[ScopeInfo]) -> None: ...
    def edit_limits(self, key: KeyInfo) -> None: ...
    def transfer(self, key: KeyInfo) -> None: ...
    def edit_tags(self, key: KeyInfo) -> None: ...
    def apply_rightsize(self, proposal: Proposal) -> None: ...
    def apply_networks(self, key: KeyInfo, use: NetworkUse) -> None: ...
    def undo(self) -> None: ...
    def copy_name(self, key: KeyInfo) -> None: ...
    def copy_public_id(self, key: KeyInfo) -> None: ...


def event_cells(event: Event, detail_width: int = 200) -> list[Text]:
    """When, action, actor and detail of one event, shown literally (never as markup)."""
    detail = event.detail
    if len(detail) > detail_width:
        detail = detail[: max(detail_width - 1, 0)] + "…"
    cells = (minute(event.at), event.action, actor_text(event), detail)
    return [Text(printable(v)) for v in cells]


def lifecycle_rows(info: KeyInfo, now: datetime) -> list[tuple[str, str]]:
    """State, expiry (relative and absolute), disabled (when, why) and an old secret in grace."""
    text, kind = states.marker(info, now)
    state = {
        states.SOON_KIND: "active, expires soon (⚠)",
        states.GRACE: "active; an old secret is retiring (↻)",
        states.UNUSED: f"active, unused for {states.UNUSED_AFTER.days} days or more",
        states.LEAKED: "leaked (disabled): services refuse it (401)",
    }.get(kind, text)
    if kind == states.EXPIRED or (kind == states.DISABLED and info.expired(now)):
        state += "; services refuse it (401)" if kind == states.EXPIRED else ", and expired"
    rows = [("State", state)]
    if info.expires_at is None:
        rows.append(("Expires", "never"))
    else:
        word = "expired" if info.expired(now) else "expires"
        rows.append(("Expires", f"{word} {relative_and_absolute(info.expires_at, now)}"))
    if info.disabled_at is not None:
        why = f" · reason: {info.disabled_reason}" if info.disabled_reason else " · no reason given"
        rows.append(("Disabled", relative_and_absolute(info.disabled_at, now) + why))
    if states.in_grace(info, now):
        assert info.grace_until is not None
        retiring = absolute(info.grace_until, seconds=True)
        rows.append(("Old secret", f"{info.old_public_id} retiring at {retiring}"))
        rows.append(("Grace ends", f"{relative(info.grace_until, now)} · O ends it now"))
    return rows


# Recreate (or rotate: the store gives a leaked secret no grace) does not clear the disabled
# state, so the new secret works once the admin enables the key; before it, enable is refused.
RECREATE_HINT = (
    "press r to recreate it (new secret, shown once; the leaked one never works again), then "
    "x to enable it"
)
RECREATED_HINT = "the leaked secret no longer works (recreated since): x enables the key"


def leak_rows(info: KeyInfo, leaks: list[Leak], now: datetime) -> list[tuple[str, str]]:
    """Where and when the key last leaked (from its key.leak events), and what to do next."""
    rows = []
    if leaks:
        newest = leaks[0]
        earlier = f" (+{len(leaks) - 1} earlier)" if len(leaks) > 1 else ""
        rows.append(("Leaked at", newest.where or "unknown"))
        reported = f"reported by {newest.source}, key {newest.outcome}{earlier}"
        rows.append(("Reported", f"{relative_and_absolute(newest.at, now)} · {reported}"))
    if info.leaked:  # the store's mark: the current secret leaked
        rows.append(("Next", RECREATE_HINT))
    elif info.leak_replaced:
        rows.append(("Next", RECREATED_HINT))
    return rows


def limit_use_text(use: LimitUse, now: datetime) -> str:
    """'600/m (key) · 12 used (2 %) · ends in 40 s' (its window); the pool's as 'owner's pool'; ⚠ at
    80 % or more."""
    whose = "key" if use.of == "key" else "owner's pool"
    if use.used is None:
        return f"{use.limit} ({whose}) · use unknown"
    share = 100 * use.used // use.limit.count
    near = " ⚠" if use.near else ""
    # A window ending within the minute has turned before anyone reads when it ends.
    ends = ""
    if use.window_ends is not None and use.window_ends - now >= timedelta(minutes=1):
        ends = f" · ends {relative(use.window_ends, now)}"
    return f"{use.limit} ({whose}) · {use.used:,} used ({share} %){near}{ends}"


def title(key: KeyInfo) -> str:
    """The detail's top line: owner first, so a narrow line cuts the name (shown whole below)."""
    return f"Key of {key.owner}: {key.name}"


def limit_rows(read: LimitUses, now: datetime, width: int = 200) -> list[tuple[str, str]]:
    """One row per limit with its use now (each cut to width); when the store of counts cannot
    be asked, one row: the limits, 'use unknown' and why."""
    if not read.uses:
        return [("Limits", "none · L sets them")]
    if read.unknown:
        keys = " ".join(str(u.limit) for u in read.uses if u.of == "key") or "none"
        pool = " ".join(str(u.limit) for u in read.uses if u.of == "owner")
        limits = keys + (f" · owner's pool {pool}" if pool else "")
        return [("Limits", clip(f"{limits} · use unknown: {read.unknown}", width))]
    return [
        ("Limits" if i == 0 else "", clip(limit_use_text(use, now), width))
        for i, use in enumerate(read.uses)
    ]


def graph_note(report: KeyUsage) -> str:
    """The line under the hourly graph: its peak, its total, and the refusals of the window."""
    hourly = report.hourly
    peak = max((p.allowed for p in hourly), default=0)
    total = sum(p.allowed for p in hourly)
    refused = sum(f.requests for f in report.forbidden)
    return (
        f"peak {peak:,}/h · {total:,} in 7d · in {WINDOW}: {refused:,} refused (403), "
        f"{counted(report.wrong_secret, 'wrong secret')}"
    )


def old_secret_lines(report: KeyUsage, now: datetime) -> list[str]:
    """One line per old secret used in the window (a recreate or rotation replaced it): the
    evidence a leak investigation needs, kept with the key."""
    return [
        f"old secret {s.public_id} (replaced {relative(s.replaced_at, now)}): in {WINDOW} "
        f"{s.requests:,} req, {s.forbidden:,} refused (403), "
        f"{counted(s.wrong_secret, 'wrong secret')}"
        for s in report.old_secrets
    ]


def use_text(requests: int, last_used: datetime | None, now: datetime) -> str:
    """A scope's use: requests in the window and its last use ('12 req · 3 h ago')."""
    return f"{requests:,} req · {relative(last_used, now)}"


def proposal_text(proposal: Proposal | None, report: KeyUsage, now: datetime) -> str:
    """The right-size line: what the proposal drops and keeps, and the key that applies it.

    Without a proposal, why not, in the rules of store.rightsizing: the scope lines above it
    show each scope's requests, so the reason must agree with them (a key that used no scope
    is no candidate for narrowing, yet its scopes show `0 req · never`).
    """
    if proposal is not None:
        drop, keep = " ".join(proposal.drop), " ".join(proposal.keep)
        return f"drop {drop} (unused for {WINDOW}), keep {keep} · p applies it (asks first)"
    info, used = report.info, [u for u in report.scopes if u.requests > 0]
    if info.created_at > now - DEFAULT_WINDOW:
        return f"no proposal yet: the key is younger than {WINDOW}"
    if len(info.scopes) < 2:
        return "no proposal: the key has one scope, and keeps at least one"
    if not used:
        return (
            f"no proposal: no scope was used in the last {WINDOW} (an unused key is one to "
            "delete, not to narrow)"
        )
    return f"no proposal: every scope was used in the last {WINDOW}"


def network_rows(
    info: KeyInfo, owner: NetworkRules | None, use: NetworkUse | None, width: int = 200
) -> list[tuple[str, str]]:
    """The key's rules and mode, its owner's, its recent (would-be) refusals and the proposal;
    nothing at all for a key that has no rules, no refusals and no recorded networks."""
    if use is None or (info.networks is None and owner is None and not use.came_from):
        return []
    rows = [("Networks", info.networks.summary() if info.networks else "anywhere")]
    if owner is not None:
        rows.append(("", f"and the owner's: {owner.summary()}"))
    for refusal in use.refusals[:5]:
        what = "would refuse" if refusal.shadow else "refused"
        rows.append(
            ("", f"{what} {refusal.requests:,} from {refusal.network} {refusal.route}".rstrip())
        )
    if use.came_from:
        proposal = " ".join(str(c) for c in use.proposal[:6])
        more = f" and {len(use.proposal) - 6} more" if len(use.proposal) > 6 else ""
        rows.append(("", f"proposal ({use.days} d): {proposal}{more} · N applies it (shadow)"))
    return [(label, clip(text, width)) for label, text in rows]


DetailData = tuple[
    KeyDetail,
    list[ScopeInfo],
    list[Leak],
    KeyUsage,
    Proposal | None,
    LimitUses,
    tuple[NetworkRules | None, NetworkUse],
]


class KeyDetailScreen(LiveScreen[DetailData]):
    """Enter on a key opens this; e edits its scopes, r and d act as in the table."""

    BINDINGS = bindings(DETAIL)

    def __init__(self, key: KeyInfo, session: Session, writes: KeyRequests) -> None:
        """writes: the key table's (KeysScreen.writes), which this view asks to act."""
        super().__init__(session)
        self.key = key
        self.detail: KeyDetail | None = None
        self.catalog: list[ScopeInfo] = []
        self.leaks: list[Leak] = []
        self.usage: KeyUsage | None = None
        self.proposal: Proposal | None = None
        self.limit_uses = LimitUses(())
        self.networks: NetworkUse | None = None
        self.writes = writes
        self._asked_delete = False  # the admin pressed d here: the table reports the deletion
        self._gone = False

    def compose(self) -> ComposeResult:
        key = self.key
        yield self.context_line(title(key))
        with VerticalScroll(id="detail-top"):
            yield Static("Loading…", id="detail-fields")
            yield Static(f"Scopes · requests in {WINDOW} · last use", classes="section")
            yield VerticalScroll(id="detail-scopes")
            yield Static("Requests per hour, last 7 days (UTC)", classes="section")
            yield Sparkline([], id="detail-graph")
            yield Static("", id="detail-graph-note")
            yield Static("Right-size", classes="section")
            yield Static("", id="detail-rightsize")
        yield Static("Events, newest first (times in UTC)", classes="section")
        table: DataTable[Text] = DataTable(id="key-events", cursor_type="row", zebra_stripes=True)
        table.add_columns("When", "Action", "Actor", "Detail")
        yield table
        yield Static("", id="status")
        yield FittingFooter()

    # --- reading ------------------------------------------------------------------------------

    def read_store(self, store: KeyStore) -> DetailData:
        owner, name = self.key.owner, self.key.name
        try:
            detail = store.key_detail(owner, name)
        except KeyNotFoundError:
            # Transferred (here or elsewhere): the same public id under another owner is still
            # this key; follow it rather than say it is gone.
            moved = store.credential(self.key.public_id)
            if moved is None or moved.info.name != name or moved.info.owner == owner:
                raise
            owner = moved.info.owner
            detail = store.key_detail(owner, name)
        report = store.key_usage(owner, name, DEFAULT_WINDOW)
        # The CLI's `keys rightsize NAME` read: the same proposal, and the same apply path.
        proposals = store.rightsize(DEFAULT_WINDOW, owner=owner, name=name).proposals
        proposal = proposals[0] if proposals else None
        # Never fails: a store of counts that cannot be asked makes the use unknown.
        uses = store.limit_use(detail.info)
        # The CLI's `keys networks NAME` read: the same proposal, and the same apply path.
        networks = (store.owner_networks(owner), store.network_use(owner, name))
        leaks = store.leaks(owner, name)
        return detail, store.list_scopes(), leaks, report, proposal, uses, networks

    def read_failed(self, failure: Failure) -> Message:
        if isinstance(failure.error, KeyNotFoundError):
            return KeyVanished(self.key.owner, self.key.name)
        return super().read_failed(failure)

    def show(self, data: DetailData) -> None:
        self.detail, self.catalog, self.leaks, self.usage, self.proposal, uses, nets = data
        self.limit_uses = uses
        fence, self.networks = nets
        info, now = self.detail.info, self.session.store.clock()
        self.key = info  # a transfer moves it to another owner: the next read follows
        self.query_one(ContextLine).set_what(title(info))  # and the title names the new one
        origin = self.detail.origin
        if origin is None:
            made = ("Created by", "unknown (no event recorded)")
        else:
            label = {"key.recreate": "Recreated by", "key.rotate": "Rotated by"}.get(
                origin.action, "Created by"
            )
            made = (label, f"{actor_text(origin)} · {relative(origin.at, now)}")
        rotated = origin is not None and origin.action in ("key.rotate", "key.recreate")
        rows = [
            # Which keys change owner and tags; an untagged key's hint rides on the Owner row
            # (a row of its own would push the scopes below the fold at 80x24).
            ("Owner", f"{info.owner} · T transfers it" + ("" if info.tags else " · g tags it")),
            ("Name", info.name),
            ("Public id", info.public_id),
            *lifecycle_rows(info, now),
            *leak_rows(info, self.leaks, now),
            # created_at is the creation or the last rotation (the secret's own age)
            ("Rotated" if rotated else "Created", absolute(info.created_at, seconds=True)),
            ("Last used", relative_and_absolute(info.last_used_at, now)),
            made,
            # The key's maker, when the row above names another act (a rotation) or nothing.
            *(
                [("Made by", info.created_by)]
                if info.created_by and (rotated or not origin)
                else []
            ),
            *([("Tags", f"{pairs_words(info.tags)} · g sets them")] if info.tags else []),
            *([("Metadata", pairs_words(info.meta))] if info.meta else []),
            *limit_rows(uses, now, max(self.size.width - _LABEL - 2, 20)),
            *network_rows(info, fence, self.networks, max(self.size.width - _LABEL - 2, 20)),
        ]
        fields = Content("\n").join(
            Content.assemble((label.ljust(_LABEL), "bold"), printable(value))
            for label, value in rows
        )
        self.query_one("#detail-fields", Static).update(fields)
        self._show_usage(self.usage, now)
        self._show_scopes(info)
        table = self.query_one("#key-events", DataTable)
        row = table.cursor_row
        table.clear()
        events = self.detail.events
        action_width = max((len(e.action) for e in events), default=6)
        actor_width = max((len(actor_text(e)) for e in events), default=5)
        used = len("2026-11-01 09:30") + action_width + actor_width + 2 * 4  # cell padding
        for event in events:
            table.add_row(*event_cells(event, max(self.size.width - used, 12)), key=str(event.id))
        if self.detail.events:
            table.move_cursor(row=min(row, len(self.detail.events) - 1))
        self.show_status()
        self.refresh_bindings()

    def _show_usage(self, report: KeyUsage, now: datetime) -> None:
        graph = self.query_one("#detail-graph", Sparkline)
        graph.data = [p.allowed for p in report.hourly]
        lines = [graph_note(report), *old_secret_lines(report, now)]
        note = Content("\n").join(literal(line) for line in lines)
        self.query_one("#detail-graph-note", Static).update(note)
        self.query_one("#detail-rightsize", Static).update(
            literal(proposal_text(self.proposal, report, now))
        )

    def _show_scopes(self, info: KeyInfo) -> None:
        descriptions = {s.name: s.description for s in self.catalog}
        uses = {u.scope: u for u in self.usage.scopes} if self.usage is not None else {}
        now = self.session.store.clock()
        box = self.query_one("#detail-scopes", VerticalScroll)
        box.remove_children()
        width = max((len(s) for s in info.scopes), default=0) + 2
        lines = []
        for scope in info.scopes:
            name = Static(literal(scope), classes="scope-name")
            name.styles.width = width
            use = uses.get(scope)
            used = use_text(use.requests, use.last_used, now) if use is not None else ""
            lines.append(
                Horizontal(
                    name,
                    Static(literal(descriptions.get(scope, "")), classes="scope-text"),
                    Static(literal(used), classes="scope-use"),
                )
            )
        box.mount_all(lines)

    def status_text(self) -> str:
        if self._gone:
            return "This key no longer exists."
        count = len(self.detail.events) if self.detail else 0
        # the lifecycle keys, which the footer has no room for at 80 columns
        toggle = "enable" if self.detail is not None and self.detail.info.disabled else "disable"
        grace = " · O end grace" if self.check_action("end_grace", ()) else ""
        rightsize = " · p right-size" if self.check_action("apply_rightsize", ()) else ""
        rightsize += " · N networks" if self.check_action("apply_networks", ()) else ""
        # The undo first, naming its key: it may be another key's change (the last one made).
        undoable = self.session.undoable
        undo = f"u undo {change_of(undoable)} · " if undoable is not None else ""
        keys = f"R rotate{grace} · x {toggle} · E expiry · L limits{rightsize}"
        return f"{undo}{counted(count, 'event')} of this key · {keys}"

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        return self.offers(action)

    def offers(self, action: str) -> bool:
        """Whether action can act in this state (the palette asks, as check_action does)."""
        # O (end grace) is offered only while the key's old secret is in grace.
        if action == "end_grace":
            info = None if self._gone or self.detail is None else self.detail.info
            return info is not None and states.in_grace(info, self.session.store.clock())
        if action == "apply_rightsize":  # p only while there is a proposal to apply
            return not self._gone and self.proposal is not None
        if action == "apply_networks":  # N only while the key was used from somewhere
            return not self._gone and self.networks is not None and bool(self.networks.came_from)
        return True

    def on_key_vanished(self, message: KeyVanished) -> None:
        message.stop()
        if self._gone:  # a second read in flight found it gone too: one warning is enough
            return
        self._gone = True
        self.show_status()
        if not self._asked_delete:
            self.notify(
                f"Key {message.name!r} of {message.owner} no longer exists.",
                severity="warning",
                markup=False,
            )
        if self.is_active:
            self.dismiss(None)

    def on_screen_resume(self) -> None:
        if self._gone:
            self.dismiss(None)  # deleted while a dialog was open over this view

    # --- actions ------------------------------------------------------------------------------

    def _current(self) -> KeyInfo | None:
        if self._gone or self.detail is None:
            self.notify("The key is not loaded (yet).", severity="warning")
            return None
        return self.detail.info

    def action_edit_scopes(self) -> None:
        key = self._current()
        if key is not None:
            self.writes.edit_scopes(key, self.catalog)

    def action_edit_limits(self) -> None:
        if (key := self._current()) is not None:
            self.writes.edit_limits(key)

    def action_transfer(self) -> None:
        if (key := self._current()) is not None:
            self.writes.transfer(key)

    def action_edit_tags(self) -> None:
        if (key := self._current()) is not None:
            self.writes.edit_tags(key)

    def action_apply_rightsize(self) -> None:
        """Ask, naming the key and the scopes to drop; then the CLI's `rightsize --apply` path."""
        if self._gone or self.proposal is None:
            self.notify("No right-size proposal for this key.", severity="warning")
            return
        self.writes.apply_rightsize(self.proposal)

    def action_apply_networks(self) -> None:
        """Ask, naming the networks; then the CLI's `keys networks --apply` path (shadow)."""
        key = self._current()
        if key is None:
            return
        if self.networks is None or not self.networks.came_from:
            self.notify("No networks recorded for this key yet.", severity="warning")
            return
        self.writes.apply_networks(key, self.networks)

    def action_delete(self) -> None:
        key = self._current()
        if key is not None:
            self._asked_delete = True  # the table reports the deletion, not this view
            self.writes.delete(key)

    def action_recreate(self) -> None:
        if (key := self._current()) is not None:
            self.writes.recreate(key)

    def action_rotate(self) -> None:
        if (key := self._current()) is not None:
            self.writes.rotate(key)

    def action_end_grace(self) -> None:
        if (key := self._current()) is not None:
            self.writes.end_grace(key)

    def action_toggle_disabled(self) -> None:
        if (key := self._current()) is not None:
            self.writes.toggle_disabled(key)

    def action_set_expiry(self) -> None:
        if (key := self._current()) is not None:
            self.writes.set_expiry(key)

    def action_undo(self) -> None:
        if self._current() is not None:
            self.writes.undo()  # the last change, whichever key it was made on

    def action_copy_name(self) -> None:
        if (key := self._current()) is not None:
            self.writes.copy_name(key)

    def action_copy_public_id(self) -> None:
        if (key := self._current()) is not None:
            self.writes.copy_public_id(key)
