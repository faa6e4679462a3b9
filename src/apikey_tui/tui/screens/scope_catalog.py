"""The scope catalog: each scope, what it gives access to, and how many keys hold it."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Input, Static

from apikey_tui.errors import ScopeInUseError
from apikey_tui.names import counted, printable
from apikey_tui.store import ScopeUsage
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.scope_form import ScopeEdit, ScopeFormDialog
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.messages import CatalogChanged, ScopeRemovalRefused
from apikey_tui.tui.screens.live import LIST_MOVES, LiveScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import clip, literal

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore

_SHOWN_HOLDERS = 10


def holders_sentence(scope: str, holders: list[str], total: int | None = None) -> str:
    """'Scope 'x' is held by 3 keys: a/b, a/c, d/e. Remove it from them first.'

    total: how many keys hold it, when holders lists only the first of them.
    """
    total = len(holders) if total is None else max(total, len(holders))
    shown = ", ".join(holders[:_SHOWN_HOLDERS])
    if total > _SHOWN_HOLDERS:
        shown += f" and {total - _SHOWN_HOLDERS:,} more"
    noun = "key" if total == 1 else "keys"
    return f"Scope {scope!r} is held by {total:,} {noun}: {shown}. Remove it from those keys first."


class ScopeCatalogScreen(LiveScreen[list[ScopeUsage]]):
    """c on the key table opens this; n adds, e describes and d removes a scope; / filters."""

    BINDINGS = [
        Binding("n", "add", "Add", priority=True),
        Binding("e", "describe", "Describe", priority=True),
        Binding("d", "remove", "Remove"),
        # At once, as on the key table: '/web' in one burst is a filter, never 'e' (Describe).
        Binding("slash", "focus_filter", "Filter", priority=True),
        *LIST_MOVES,
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.usage: list[ScopeUsage] = []
        self._rows: list[ScopeUsage] = []  # the rows shown (the filter's), in the table's order
        self._refusal: str | None = None

    def compose(self) -> ComposeResult:
        yield self.context_line("Scope catalog")
        yield Input(
            placeholder="/ filter by scope name or description", id="scope-filter", compact=True
        )
        table: DataTable[Text] = DataTable(id="scope-table", cursor_type="row", zebra_stripes=True)
        table.add_column("Scope", key="scope")
        table.add_column("Keys", key="keys")
        table.add_column("Description", key="description")
        yield table
        yield Static("", id="scope-description")
        yield Static("", id="status")
        yield FittingFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#scope-table", DataTable).focus()  # the list first; / for the filter

    def read_store(self, store: KeyStore) -> list[ScopeUsage]:
        return store.scope_usage()

    def show(self, data: list[ScopeUsage]) -> None:
        self.usage = data
        self._fill()
        self.show_status()

    def on_resize(self) -> None:
        self._fill()

    def shown(self) -> list[ScopeUsage]:
        """The scopes the filter lets through (name or description contains it, any case)."""
        wanted = self.query_one("#scope-filter", Input).value.strip().lower()
        if not wanted:
            return self.usage
        return [s for s in self.usage if wanted in s.name or wanted in s.description.lower()]

    @on(Input.Changed, "#scope-filter")
    def _filter_changed(self) -> None:
        self._fill()
        self.show_status()

    @on(Input.Submitted, "#scope-filter")
    def _filter_submitted(self) -> None:
        self.query_one("#scope-table", DataTable).focus()

    def action_focus_filter(self) -> None:
        self.set_focus(self.query_one("#scope-filter", Input))  # at once: '/web' in one burst

    def action_back(self) -> None:
        """Escape: from the filter back to the scopes; else back to the key table."""
        if isinstance(self.focused, Input):
            self.query_one("#scope-table", DataTable).focus()
        else:
            self.dismiss(None)

    def _fill(self) -> None:
        """Put the scopes in the table; a description longer than the room left ends in '…'."""
        data = self.shown()
        table = self.query_one("#scope-table", DataTable)
        current = self.selected()
        counts = [f"{s.keys:,}" for s in data]
        name_width = max((len(s.name) for s in data), default=5)
        count_width = max(map(len, counts), default=4)
        room = max(self.size.width - name_width - max(count_width, 4) - 2 * 3 - 2, 20)
        table.clear()
        for scope, count in zip(data, counts, strict=True):
            table.add_row(
                Text(printable(scope.name)),
                Text(count.rjust(count_width)),
                Text(printable(clip(scope.description, room))),
                key=scope.name,
            )
        self._rows = data
        names = [s.name for s in data]
        if current is not None and current.name in names:
            table.move_cursor(row=names.index(current.name))
        self._describe_highlighted()

    def selected(self) -> ScopeUsage | None:
        """The scope under the cursor."""
        table = self.query_one("#scope-table", DataTable)
        if not self._rows or table.row_count == 0:
            return None
        row = table.cursor_row
        return self._rows[row] if 0 <= row < len(self._rows) else None

    @on(DataTable.RowHighlighted)
    def _describe_highlighted(self) -> None:
        scope = self.selected()
        text = "" if scope is None else f"{scope.name}: {scope.description or '(no description)'}"
        self.query_one("#scope-description", Static).update(literal(text))

    def status_text(self) -> str:
        if self._refusal is not None:
            return self._refusal
        total, shown = len(self.usage), len(self._rows)
        if shown != total:
            return f"{shown:,} of {counted(total, 'scope')} match · / filter"
        return f"{counted(total, 'scope')} in the catalog · / filter"

    def show_status(self) -> None:
        super().show_status()
        if self._refusal is not None and self._unreachable is None:
            self.query_one("#status", Static).add_class("error")

    # --- add and describe ---------------------------------------------------------------------

    def action_add(self) -> None:
        taken = {s.name for s in self.usage}
        self.app.push_screen(ScopeFormDialog(taken=taken), self._edited)

    def action_describe(self) -> None:
        scope = self.selected()
        if scope is None:
            self.notify("Select a scope first.", severity="warning")
            return
        self.app.push_screen(ScopeFormDialog(scope.name, scope.description), self._edited)

    def _edited(self, edit: ScopeEdit | None) -> None:
        if edit is None:
            return
        name, description = edit.name, edit.description
        if edit.new:
            self.run_store(
                lambda store: CatalogChanged(
                    f"Added scope {store.add_scope(name, description).name!r}."
                ),
                f"Add scope {name!r}",
            )
        else:
            self.run_store(
                lambda store: CatalogChanged(
                    f"Described scope {store.describe_scope(name, description).name!r}."
                ),
                f"Describe scope {name!r}",
            )

    # --- remove -------------------------------------------------------------------------------

    def action_remove(self) -> None:
        scope = self.selected()
        if scope is None:
            self.notify("Select a scope first.", severity="warning")
            return
        name = scope.name
        if scope.keys:
            # Not offered: the catalog would refuse. Say so, naming the keys (read now).
            self.run_store(
                lambda store: self._held(store, name), f"Read the holders of {name!r}", writes=False
            )
            return
        body = "No key holds it. A key can no longer be given this scope."
        dialog = ConfirmDialog(f"Remove scope {name!r} from the catalog?", body, "Remove")

        def answered(yes: bool | None) -> None:
            if yes:
                self.run_store(lambda store: self._remove(store, name), f"Remove scope {name!r}")

        self.app.push_screen(dialog, answered)

    @staticmethod
    def _held(store: KeyStore, name: str) -> Message:
        held = store.scope_holders(name, limit=_SHOWN_HOLDERS)
        usage = {u.name: u.keys for u in store.scope_usage()}
        return ScopeRemovalRefused(name, held, "", total=usage.get(name, len(held)))

    @staticmethod
    def _remove(store: KeyStore, name: str) -> Message:
        try:
            store.remove_scope(name)
        except ScopeInUseError as exc:
            return ScopeRemovalRefused(name, list(exc.holders), str(exc))
        return CatalogChanged(f"Removed scope {name!r}.")

    def on_scope_removal_refused(self, message: ScopeRemovalRefused) -> None:
        message.stop()
        self._refusal = holders_sentence(message.scope, message.holders, message.total)
        title = "Not removed" if message.reason else "Cannot be removed"
        self.notify(self._refusal, title=title, severity="error", markup=False)
        self.reload()

    def on_catalog_changed(self, message: CatalogChanged) -> None:
        message.stop()
        self._refusal = None
        self.notify(message.note, markup=False)
        self.reload()
