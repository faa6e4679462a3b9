"""The Owners view (`:owners`): people, teams and service accounts, their members, key counts
and limit pools; a pool edited with undo, a person's offboarding previewed and applied."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static

from apikey_tui.errors import ApiKeyError
from apikey_tui.names import counted, printable, shorten
from apikey_tui.store.offboarding import OWNS, default_reason, not_a_person
from apikey_tui.store.owner_limits import OwnerLimits
from apikey_tui.store.owners import OwnerInfo
from apikey_tui.tui.dialogs.ask_value import Answer, AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import parse_limits
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.screens.live import LIST_MOVES, LiveScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import clip, fit_parts, literal
from apikey_tui.tui.undo_words import limits_words

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import Batch, KeyStore
    from apikey_tui.store.offboarding import Preview


@dataclass
class OwnersChanged(Message):
    """A pool was set or an offboarding applied (or undone); undo: what `u` reverses now."""

    note: str
    undo: OwnerLimits | Batch | None


@dataclass
class OffboardingRead(Message):
    """A person's offboarding preview, read off the event loop, to show before applying."""

    preview: Preview


def preview_lines(seen: Preview, width: int = 66) -> list[str]:
    """The preview as lines: each key, why it is held, last use and what applying does."""
    lines = []
    for h in seen.keys:
        key = h.key
        # The CLI's words (owner_commands._plan): "disabled" would read as the state it is in now.
        act = ("stays disabled" if key.disabled else "disable") if OWNS in h.why else "keep"
        used = key.last_used_at.strftime("%Y-%m-%d") if key.last_used_at else "never used"
        busy = ", ".join(f"{s or '-'} {n:,}" for s, n in h.busiest[:2])
        tail = f" · {' '.join(h.why)} · {used} · {act}"
        # A long name is cut in the middle (the CLI's rule), never the line's end: what
        # applying does to the key must show at 70 columns too.
        text = shorten(f"{key.owner}/{key.name}", max(width - len(tail), 12)) + tail
        lines.append(clip(text + (f" · {busy}" if busy else ""), width))
    for m in seen.memberships:
        others = ", ".join(m.others) or "no one else"
        lines.append(clip(f"leaves {m.owner} ({m.kind}; {others})", width))
    return lines or ["holds nothing"]


class OwnersScreen(LiveScreen[list[OwnerInfo]]):
    """`:owners`: Enter shows an owner's keys, L its limit pool, b a person's offboarding, u
    undoes the last of those."""

    BINDINGS = [
        Binding("enter", "owner_keys", "Keys"),
        Binding("L", "edit_pool", "Pool"),
        Binding("b", "offboard", "Offboard"),
        Binding("u", "undo", "Undo"),
        *LIST_MOVES,
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, session: Session, show_keys: Callable[[str], None]) -> None:
        super().__init__(session)
        self.owners: list[OwnerInfo] = []
        self._show_keys = show_keys
        self._undo: OwnerLimits | Batch | None = None

    def compose(self) -> ComposeResult:
        yield self.context_line("Owners")
        table: DataTable[Text] = DataTable(id="owner-table", cursor_type="row", zebra_stripes=True)
        for label in ("Owner", "Kind", "Keys", "Members", "Pool"):
            table.add_column(label, key=label.lower())
        yield table
        yield Static("", id="owner-about")
        yield Static("", id="status")
        yield FittingFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#owner-table", DataTable).focus()

    def read_store(self, store: KeyStore) -> list[OwnerInfo]:
        return store.list_owners()

    def show(self, data: list[OwnerInfo]) -> None:
        self.owners = data
        self._fill()
        self.show_status()

    def on_resize(self) -> None:
        self._fill()
        self.show_status()  # its hints fit the new width

    def _fill(self) -> None:
        table = self.query_one("#owner-table", DataTable)
        current = self.selected()
        room = max(self.size.width - 24 - 8 - 6 - 16 - 10, 10)
        table.clear()
        for o in self.owners:
            table.add_row(
                Text(printable(clip(o.name, 24))),
                Text(o.kind),
                Text(f"{o.keys:,}".rjust(6)),
                Text(printable(clip(" ".join(o.members) or "-", room))),
                Text(clip(limits_words(o.limits), 16)),
                key=o.name,
            )
        names = [o.name for o in self.owners]
        if current is not None and current.name in names:
            table.move_cursor(row=names.index(current.name))
        self._describe()

    def selected(self) -> OwnerInfo | None:
        """The owner under the cursor."""
        table = self.query_one("#owner-table", DataTable)
        row = table.cursor_row
        return self.owners[row] if self.owners and 0 <= row < len(self.owners) else None

    @on(DataTable.RowHighlighted)
    def _describe(self) -> None:
        o = self.selected()
        text = ""
        if o is not None:
            parts = [f"{o.name} ({o.kind})"]
            if o.member_of:
                parts.append(f"in {' '.join(o.member_of)}")
            if o.meta:
                parts.append("meta " + " ".join(f"{k}={v}" for k, v in o.meta))
            if o.description:
                parts.append(o.description)
            text = " · ".join(parts)
        self.query_one("#owner-about", Static).update(literal(clip(text, self.size.width)))

    def status_text(self) -> str:
        teams = counted(sum(o.kind == "team" for o in self.owners), "team")
        services = counted(sum(o.kind == "service" for o in self.owners), "service account")
        counts = f"{counted(len(self.owners), 'owner')} ({teams}, {services})"
        # Undo first: a narrow terminal drops the hints at the end, which the footer shows too
        # (all but Enter: the table takes it, so the footer leaves it out).
        hints = ["u undo"] if self._undo is not None else []
        parts = [counts, *hints, "Enter keys", "L pool", "b offboard"]
        width = self.size.width - 2  # the status line's padding
        return fit_parts(parts, width) if width > 0 else " · ".join(parts)

    # --- actions ------------------------------------------------------------------------------

    def _chosen(self) -> OwnerInfo | None:
        owner = self.selected()
        if owner is None:
            self.notify("Select an owner first.", severity="warning")
        return owner

    @on(DataTable.RowSelected)
    def _row_chosen(self) -> None:
        self.action_owner_keys()  # Enter on the table: the table takes it before the screen

    def action_owner_keys(self) -> None:
        if (owner := self._chosen()) is not None:
            self._show_keys(owner.name)

    def action_edit_pool(self) -> None:
        owner = self._chosen()
        if owner is None:
            return
        name = owner.name
        first: AskValueDialog[Any] = AskValueDialog(
            f"Set the limit pool of {name}?",
            f"Now: {limits_words(owner.limits)}. Every key of {name} draws from it (a team's "
            "limit is shared by its keys). N/DURATION each (600/m 10000/d), or none. u undoes it.",
            prompt="Pool (N/DURATION each, or none):",
            parse=parse_limits,
            confirm_label="Set pool",
            value=" ".join(map(str, owner.limits)),
            placeholder="600/m 10000/d, or none",
        )

        def ask(dialog: AskValueDialog[Any]) -> None:
            def answered(answer: Answer[Any] | None) -> None:
                if answer is None:
                    return

                def operation(store: KeyStore) -> Message:
                    done = store.set_owner_limits(name, answer.value)
                    return OwnersChanged(f"{name}'s pool: {limits_words(done.after)}.", done)

                # A pool the store refuses (two limits of one window) reopens as typed, as a
                # key's L does (KeyWrites._ask).
                def again(error: ApiKeyError) -> None:
                    ask(dialog.again(answer.text, str(error)))

                self.run_store(operation, f"Set the pool of {name}", again=again)

            self.app.push_screen(dialog, answered)

        ask(first)

    def action_offboard(self) -> None:
        owner = self._chosen()
        if owner is None:
            return
        if (why := not_a_person(owner.name, owner.kind)) is not None:
            self.notify(f"{why}.")
            return
        name = owner.name
        self.run_store(
            lambda store: OffboardingRead(store.offboard_preview(name)),
            f"Read what {name} holds",
            writes=False,
        )

    def on_offboarding_read(self, message: OffboardingRead) -> None:
        message.stop()
        seen = message.preview
        lines = preview_lines(seen, max(self.size.width - 8, 30))
        shown = lines[:10] + ([f"… and {len(lines) - 10} more"] if len(lines) > 10 else [])
        reason = default_reason(seen.person)  # the one store.offboard gives them below
        body = [
            *shown,
            "",
            f"Applying disables their own keys (reason {reason!r}), keeps every other key "
            "working and ends their memberships: one batch, u undoes it.",
        ]
        dialog = ConfirmDialog(
            f"Offboard {seen.person}: {counted(len(seen.keys), 'key')}?", body, "Offboard"
        )

        def answered(yes: bool | None) -> None:
            if not yes:
                return

            def operation(store: KeyStore) -> Message:
                batch = store.offboard(seen)
                note = (
                    f"Offboarded {seen.person}: {counted(len(batch.after))} changed, "
                    f"{counted(len(batch.memberships), 'membership')} ended."
                )
                return OwnersChanged(note, batch)

            self.run_store(operation, f"Offboard {seen.person}")

        self.app.push_screen(dialog, answered)

    def action_undo(self) -> None:
        done = self._undo
        if done is None:
            self.notify("Nothing to undo here: only the last pool change or offboarding.")
            return

        def operation(store: KeyStore) -> Message:
            if isinstance(done, OwnerLimits):
                back = store.undo_owner_limits(done)
                return OwnersChanged(
                    f"{back.owner}'s pool is back to {limits_words(back.after)}.", None
                )
            store.undo(done)
            return OwnersChanged("Undid the offboarding.", None)

        self.run_store(operation, "Undo")

    def on_owners_changed(self, message: OwnersChanged) -> None:
        message.stop()
        self._undo = message.undo
        self.notify(message.note + (" Press u to undo." if message.undo else ""), markup=False)
        self.reload()
