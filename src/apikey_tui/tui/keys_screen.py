"""The API keys tab: the key table, its filter, and every action on one key or the marked keys."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Static

from apikey_tui.errors import (
    ApiKeyError,
    InvalidInputError,
    KeyNotFoundError,
    LifetimePolicyError,
)
from apikey_tui.names import (
    DESCRIPTION_MAX,
    check_reason,
    expiry_moment,
    parse_duration,
    parse_expiry,
)
from apikey_tui.store import Batch, KeyInfo, KeyStore, ScopeInfo, states
from apikey_tui.tui.context_line import ContextLine
from apikey_tui.tui.dialogs.ask_value import Answer, AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog, NewKeyRequest
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog, ScopeChange
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog, copy_note
from apikey_tui.tui.failures import unforeseen
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.key_actions import TABLE, bindings, typed_as_text
from apikey_tui.tui.key_table import COLUMNS, SORTABLE, Identity, KeyFilter, KeyTable
from apikey_tui.tui.messages import (
    BatchDone,
    KeyCreated,
    KeyDeleted,
    KeyLifecycleChanged,
    KeysLoaded,
    ReachabilityChanged,
    StoreFailed,
    ValueRefused,
)
from apikey_tui.tui.polling import marker_moved
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import literal
from apikey_tui.tui.times import absolute

if TYPE_CHECKING:
    from apikey_tui.names import Expiry

LISTED = 5  # keys a bulk confirmation names before "and N more"
UNDOABLE = ("disable", "enable", "set expiry", "set scopes")  # what an undo restores exactly


def named(keys: Sequence[KeyInfo], *, owners: bool = False) -> str:
    """'a, b and c': at most LISTED names, then 'and N more'; owners adds each key's owner."""
    names = [f"{k.name} of {k.owner}" if owners else k.name for k in keys]
    shown, rest = names[:LISTED], len(names) - LISTED
    if rest > 0:
        return f"{', '.join(shown)} and {rest} more"
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def counted(number: int) -> str:
    """'1 key', '3 keys'."""
    return f"{number} key" if number == 1 else f"{number} keys"


def _expiry(expires_at: datetime | None) -> str:
    """'never expires', or 'expires 2030-01-31 12:00:00 UTC'."""
    return (
        "never expires" if expires_at is None else f"expires {absolute(expires_at, seconds=True)}"
    )


class KeysScreen(Screen[None]):
    """Lists keys and runs every store call in a thread worker, so the UI never freezes."""

    BINDINGS = [
        *bindings(TABLE),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.scopes: list[ScopeInfo] = []
        self._marker: tuple[object, ...] | None = None  # None until the first load
        self._unreachable: str | None = None  # why the database cannot be reached, if it cannot
        # The reason a write just failed, while the reload after it runs: one toast says it once.
        self._reloading_after: str | None = None
        self.marked: dict[Identity, KeyInfo] = {}  # Space marks: actions then act on them all

    # --- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        session = self.session
        owner = "all owners" if session.owner is None else f"owner: {session.owner}"
        yield ContextLine(f"API keys · {owner}", session.database_label)
        yield KeyFilter(
            placeholder="/ filter by name, public id, scope, owner or state",
            id="filter",
            compact=True,
        )
        yield KeyTable(id="keys")
        yield Static("Loading keys…", id="empty")
        yield Static("", id="status")
        yield FittingFooter()

    def on_mount(self) -> None:
        table = self.query_one(KeyTable)
        self.watch(table, "cursor_row", self.refresh_bindings, init=False)  # O follows the key
        table.display = False
        table.focus()
        table.bind(self.session.store, owner=self.session.owner)  # the first rows, at once
        self.reload()
        self.set_interval(self.session.poll_seconds, self.poll)

    # --- loading ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="load")
    def reload(self) -> None:
        """Read the change marker and scopes off the event loop (the table reads its rows)."""
        store = self.session.store
        try:
            marker = store.change_marker()
            scopes = store.list_scopes()
        except ApiKeyError as exc:
            self.post_message(StoreFailed(str(exc), while_loading=True))
            return
        except Exception as exc:  # never a traceback (its locals), never a crash: one line
            self.post_message(StoreFailed(unforeseen(exc, "Reading the keys"), while_loading=True))
            return
        self.post_message(KeysLoaded(scopes, marker))

    @work(thread=True, exclusive=True, group="poll")
    def poll(self) -> None:
        """Reload when another admin, the CLI or a verifier changed something."""
        store = self.session.store
        if marker_moved(self, store.change_marker, self._unreachable, self._marker):
            self.reload()

    def on_reachability_changed(self, message: ReachabilityChanged) -> None:
        self._unreachable = message.reason
        self.show_keys()

    def on_keys_loaded(self, message: KeysLoaded) -> None:
        self._reloading_after = None
        if self._marker is not None and message.marker != self._marker:
            self.query_one(KeyTable).reload()  # the cursor follows its key (owner, name)
        self._marker = message.marker
        self.scopes = message.scopes

    @on(KeyTable.Loaded)
    def show_keys(self) -> None:
        """Show the table, or say why it is empty; the status line counts and names the sort."""
        table = self.query_one(KeyTable)
        if not table.loaded:
            return
        text = table.key_query.text.strip()
        empty = self.query_one("#empty", Static)
        if table.total == 0 and not text and self.session.owner is not None:
            # Said plainly: a mistyped owner must not look like a real one with no keys.
            empty.update(
                literal(
                    f"No API keys for {self.session.owner} yet: this database has no key of "
                    "that owner (o lists the owners that have keys). Press n to create the "
                    "first one."
                )
            )
        elif table.total == 0 and not text:
            empty.update("No API keys for anyone yet. Press n to create the first one.")
        elif table.total == 0:
            empty.update(literal(f"No key matches {text!r}."))
        table.display, empty.display = table.total != 0, table.total == 0
        if table.total is None:
            shown = "counting keys…"
        else:
            noun = "key" if table.total == 1 else "keys"
            shown = f"{table.total:,} {noun}" + (" match" if text else "")
        arrow = "▼" if table.reverse else "▲"
        sort = f"sorted by {COLUMNS[table.sort_column].lower()} {arrow} (s, S)"
        # The hint names what t switches to, not what is shown.
        times = "t: relative times" if table.absolute_times else "t: absolute times"
        status = self.query_one("#status", Static)
        if self._unreachable is not None:
            status.update(literal(f"⚠ showing the last keys read: {self._unreachable}"))
        else:
            marks = f"{len(self.marked)} marked · " if self.marked else ""
            undo = " · u: undo" if self.session.undoable is not None else ""
            status.update(f"{marks}{shown} · {sort} · {times}{undo}")
        status.set_class(self._unreachable is not None, "error")
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool:
        if typed_as_text(action, self.focused):  # in the filter, '/' and 'n' are text
            return False
        # O (end grace) is offered only for a selected key whose old secret is in grace (or,
        # with marks, when any marked key's is).
        if action == "end_grace":
            now = self.session.store.clock()
            if self.marked:
                return any(states.in_grace(k, now) for k in self.marked.values())
            key = self.selected_key()
            return key is not None and states.in_grace(key, now)
        return True

    @on(KeyTable.Failed)
    def _table_failed(self, event: KeyTable.Failed) -> None:
        self.post_message(StoreFailed(event.reason, while_loading=True))

    def selected_key(self) -> KeyInfo | None:
        """The key under the table cursor, if the table shows any."""
        table = self.query_one(KeyTable)
        return table.selected if table.display else None

    def selected_identity(self) -> tuple[str, str] | None:
        """(owner, name) of the key under the cursor: the table keeps it through reloads."""
        return self.query_one(KeyTable).selected_identity

    # --- filter and sort ----------------------------------------------------------------------

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(KeyTable).set_filter(event.value)  # the database filters, in a worker

    @on(KeyFilter.Left)
    @on(Input.Submitted, "#filter")
    def action_focus_table(self) -> None:
        """Escape: back to the table; in the table, clear a filter (as k9s and lazygit do)."""
        table, box = self.query_one(KeyTable), self.query_one("#filter", Input)
        if table.has_focus and box.value:
            box.value = ""  # Input.Changed reloads the table unfiltered
        self.set_focus(table)

    def action_focus_filter(self) -> None:
        # At once, not widget.focus() (which waits for the queue): in '/dis' typed in one burst,
        # 'd' would otherwise still reach the table and ask to delete a key.
        self.set_focus(self.query_one("#filter", Input))

    def action_sort(self) -> None:
        table = self.query_one(KeyTable)
        order = [c for c in table.columns if c in SORTABLE]
        table.sort_by(order[(order.index(table.sort_column) + 1) % len(order)], reverse=False)

    @on(KeyTable.SortRequested)
    def _header_clicked(self, event: KeyTable.SortRequested) -> None:
        self.query_one(KeyTable).sort_by(event.column)

    def action_reload(self) -> None:
        self.reload()
        self.query_one(KeyTable).reload()

    def action_details(self) -> None:
        key = self.selected_key()
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
        else:
            self.app.push_screen(KeyDetailScreen(key, self.session, self.act_on))

    def act_on(self, action: str, key: KeyInfo) -> None:
        """Run a key action (delete, rotate, …) on key: how the key's detail acts, as here."""
        getattr(self, f"action_{action}")(key)

    # --- create -------------------------------------------------------------------------------

    def action_create(self) -> None:
        session = self.session
        if not self.scopes:
            self.notify("The scope catalog is empty: add a scope with 'apikey-tui scopes add'.")
            return
        table = self.query_one(KeyTable)
        dialog = CreateKeyDialog(
            self.scopes,
            owner=session.owner or session.default_owner,
            ask_owner=session.owner is None,
            # a quick hint from the rows read so far; the database's unique key is the judge
            taken=lambda owner, name: table.known((owner, name)),
            clock=session.store.clock,
        )
        self.app.push_screen(dialog, self._create_requested)

    def _create_requested(self, request: NewKeyRequest | None) -> None:
        if request is not None:
            owner, name, scopes, expires = (
                request.owner,
                request.name,
                request.scopes,
                request.expires,
            )
            self.run_store(
                lambda store: KeyCreated(store.create_key(owner, name, scopes, expires=expires)),
                f"Create (key {name!r} of {owner})",
            )

    def run_store(
        self,
        operation: Callable[[KeyStore], Message],
        doing: str,
        *,
        again: Callable[[str], None] | None = None,
    ) -> None:
        """Run one store call off the event loop (`_store_worker`); it ends the offer of undo.

        again: on the store refusing the value asked for (an expiry past the lifetime policy),
        reopen the dialog with what was typed instead of a toast.
        """
        self.session.undoable = None
        self.show_keys()
        self._store_worker(operation, doing, again)

    @work(thread=True, group="store")
    def _store_worker(
        self,
        operation: Callable[[KeyStore], Message],
        doing: str,
        again: Callable[[str], None] | None,
    ) -> None:
        """Run one store call (argon2, the database) off the event loop; report as a message.

        A refusal is one line; so is an error nobody foresaw (e.g. an OverflowError past year
        9999), which is logged without locals: the call may hold a new key's secret in them.
        """
        try:
            message = operation(self.session.store)
        except (InvalidInputError, LifetimePolicyError) as exc:
            message = StoreFailed(str(exc)) if again is None else ValueRefused(str(exc), again)
        except ApiKeyError as exc:
            message = StoreFailed(str(exc))
        except Exception as exc:
            message = StoreFailed(unforeseen(exc, doing))
        self.post_message(message)

    def on_key_created(self, message: KeyCreated) -> None:
        self.reload()
        self._reload_views()
        key = message.created.info
        if not message.recreated and message.verb is None:  # a new key: the cursor goes to it
            self._go_to((key.owner, key.name))
        self.app.push_screen(
            RevealSecretDialog(message.created, recreated=message.recreated, verb=message.verb),
            self._reveal_closed,
        )

    def _go_to(self, identity: Identity) -> None:
        """Put the cursor on a key, first clearing a filter that might hide it.

        Whether the filter matches is the database's to say (scopes, states); a filter the
        name itself contains surely shows the key, so only that one is kept.
        """
        table = self.query_one(KeyTable)
        text = table.key_query.text.strip()
        if text and text.lower() not in identity[1].lower():
            table.set_filter("")
            self.query_one("#filter", Input).value = ""
        table.select(identity)

    def _reload_views(self) -> None:
        """Read an open key detail again now, not at its next poll."""
        for screen in self.app.screen_stack:
            if isinstance(screen, KeyDetailScreen):
                screen.reload()

    def _reveal_closed(self, _: None) -> None:
        # The secret must live nowhere once the reveal is closed, the app's copy of the
        # clipboard included (Textual keeps what it copied; it has no public way to forget it).
        self.app._clipboard = ""
        self.query_one(KeyTable).focus()

    # --- asking first -------------------------------------------------------------------------

    def _confirm_then(
        self,
        ask: Callable[[KeyInfo], ConfirmDialog],
        then: Callable[[KeyStore, KeyInfo], Message],
        key: KeyInfo | None = None,
    ) -> None:
        """Ask about the selected key; on yes, run the store call in a worker.

        The question names owner, name and public id, and the store call passes that public id
        back: if the key was recreated or deleted while the dialog was open, nothing is done.
        """
        self._ask_then(ask, lambda store, key, _: then(store, key), key)

    def _ask_then(
        self,
        ask: Callable[[KeyInfo], ConfirmDialog | AskValueDialog[Any]],
        then: Callable[[KeyStore, KeyInfo, Any], Message],
        key: KeyInfo | None = None,
    ) -> None:
        """_confirm_then for a dialog that answers with a value (None, False: no)."""
        key = self.selected_key() if key is None else key  # a key's detail view passes its own
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
            return
        chosen = key

        def operation(store: KeyStore, answer: object) -> Message:
            try:
                return then(store, chosen, answer)
            except KeyNotFoundError as exc:
                raise ApiKeyError(f"{exc}: it was deleted meanwhile; nothing was done") from None

        self._ask(ask(key), operation, f"key {key.name!r} of {key.owner}")

    def _ask(
        self,
        dialog: ConfirmDialog | AskValueDialog[Any],
        operation: Callable[[KeyStore, Any], Message],
        what: str,
    ) -> None:
        """Show dialog; on yes, run operation with its answer. A value the store refuses (an
        expiry past the policy) opens the dialog again, holding what was typed."""

        def answered(answer: object) -> None:
            if answer is None or answer is False:
                return
            again = None
            if isinstance(dialog, AskValueDialog) and isinstance(answer, Answer):
                typed: Answer[Any] = answer
                value_dialog: AskValueDialog[Any] = dialog

                def again(reason: str) -> None:
                    self._ask(value_dialog.again(typed.text, reason), operation, what)

            self.run_store(
                lambda store: operation(store, answer),
                f"{dialog.confirm_label} ({what})",
                again=again,
            )

        self.app.push_screen(dialog, answered)

    def on_value_refused(self, message: ValueRefused) -> None:
        message.again(message.reason)

    # --- marks: Space marks keys; d, x, E, R and O then act on every marked key --------------

    def action_toggle_mark(self) -> None:
        table = self.query_one(KeyTable)
        key = self.selected_key()
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
            return
        identity = (key.owner, key.name)
        if self.marked.pop(identity, None) is None:
            self.marked[identity] = key
        self._show_marks()
        table.action_move(1)  # as in htop and mc: Space marks, then steps to the next key

    def _show_marks(self) -> None:
        self.query_one(KeyTable).marked = frozenset(self.marked)
        self.query_one(KeyTable).refresh()
        self.show_keys()

    def _marked_keys(self) -> list[KeyInfo]:
        """The marked keys, by owner and name (the order confirmations list them in)."""
        return [self.marked[identity] for identity in sorted(self.marked)]

    def _bulk(
        self,
        dialog: ConfirmDialog | AskValueDialog[Any],
        keys: Sequence[KeyInfo],
        run: Callable[[KeyStore, Any], Batch],
        done: str,
    ) -> None:
        """Ask once about keys; on yes, one store call (one transaction, one batch id).

        done: the past tense for the notice ('Disabled'); the marks stay if it is refused.
        """

        def operation(store: KeyStore, answer: object) -> Message:
            batch = run(store, answer)
            return BatchDone(batch, f"{done} {counted(len(batch.after))}: {named(batch.after)}.")

        self._ask(dialog, operation, counted(len(keys)))

    def _owners(self) -> bool:
        """Whether confirmations name owners too (the table shows every owner's keys)."""
        return self.session.owner is None

    def on_batch_done(self, message: BatchDone) -> None:
        batch = message.batch
        note = message.note
        if batch.action in UNDOABLE:
            self.session.undoable = batch
            note += " Press u to undo."
        if len(batch.after) > 1 or self.marked:
            self.marked.clear()
            self._show_marks()
        self.notify(note, markup=False)
        self.reload()
        self._reload_views()
        self._reveal_each(list(batch.created))

    def _reveal_each(self, created: list[Any]) -> None:
        """Show each new secret of a bulk rotation once, one reveal after the other."""
        if not created:
            return
        first, *rest = created
        count = f" ({len(created)} to show)" if rest else ""
        verb = f"rotated{count}: the old secret works until the grace ends"

        def closed(_: None) -> None:
            self._reveal_closed(None)
            self._reveal_each(rest)

        self.app.push_screen(RevealSecretDialog(first, verb=verb), closed)

    # --- undo ---------------------------------------------------------------------------------

    def action_undo(self, _key: KeyInfo | None = None) -> None:
        """Undo the last reversible change (_key: the detail's key, as act_on passes it)."""
        batch = self.session.undoable
        if batch is None:
            self.notify(
                "Nothing to undo: only the last disable, enable, expiry or scopes change can be."
            )
            return
        keys = batch.before
        dialog = ConfirmDialog(
            f"Undo the {batch.action} of {counted(len(keys))}?",
            f"{named(keys, owners=self._owners())} get back exactly what they had before: "
            "disabled or not (with the same time and reason), expiry and scopes. Refused, and "
            "nothing is done, if any of them changed since.",
            "Undo",
        )

        def operation(store: KeyStore, _: object) -> Message:
            undone = store.undo(batch)
            return BatchDone(undone, f"Undid the {batch.action} of {named(undone.after)}.")

        self._ask(dialog, operation, f"undo of {counted(len(keys))}")

    # --- scopes -------------------------------------------------------------------------------

    def action_edit_scopes(self, key: KeyInfo | None = None) -> None:
        """Edit one key's scopes (the detail's e); confirmed, then one batch that u undoes."""
        key = self.selected_key() if key is None else key
        if key is not None:
            self.app.push_screen(EditScopesDialog(key, self.scopes), self._scopes_chosen)

    def _scopes_chosen(self, change: ScopeChange | None) -> None:
        if change is None:
            return
        key = change.key
        added = ", ".join(change.added) or "none"
        removed = ", ".join(change.removed) or "none"
        dialog = ConfirmDialog(
            f"Change the scopes of key {key.name!r} of {key.owner}?",
            f"Adds: {added}. Removes: {removed}. Services see the new scopes at once: a "
            "request that needs a removed scope is refused. u undoes it, until the next change.",
            "Change scopes",
        )

        def operation(store: KeyStore, _: object) -> Message:
            batch = store.set_scopes_of_keys([key], change.scopes)
            scopes = " ".join(batch.after[0].scopes)
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} now has: {scopes}.")

        self._ask(dialog, operation, f"key {key.name!r} of {key.owner}")

    # --- copy ---------------------------------------------------------------------------------

    def action_copy_name(self, key: KeyInfo | None = None) -> None:
        self._copy(key, "name", "y")

    def action_copy_public_id(self, key: KeyInfo | None = None) -> None:
        self._copy(key, "public id", "Y")

    def _copy(self, key: KeyInfo | None, what: str, again: str) -> None:
        """Copy a key's name or public id (never its secret) and say truly where it went."""
        key = self.selected_key() if key is None else key
        if key is None:
            self.notify("Select a key in the table first.", severity="warning")
            return
        text = key.name if what == "name" else key.public_id
        self.app.copy_to_clipboard(text)
        note = copy_note(again=again)
        self.notify(
            f"The {what} {text}: {note.text}",
            severity="information" if note.can_arrive else "warning",
            markup=False,
        )

    # --- delete and recreate ------------------------------------------------------------------

    def action_delete(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            keys = self._marked_keys()
            self._bulk(
                ConfirmDialog(
                    f"Delete {counted(len(keys))}?",
                    f"{named(keys, owners=self._owners())}. Every service refuses these keys as "
                    "soon as they are deleted. This cannot be undone.",
                    f"Delete {len(keys)}",
                ),
                keys,
                lambda store, _: store.delete_keys(keys),
                "Deleted",
            )
            return
        self._confirm_then(
            lambda key: ConfirmDialog(
                f"Delete key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}. Every service refuses this key as soon as it is "
                "deleted. This cannot be undone.",
                "Delete",
            ),
            lambda store, key: KeyDeleted(
                store.delete_key(key.owner, key.name, expected_public_id=key.public_id)
            ),
            key,
        )

    def on_key_deleted(self, message: KeyDeleted) -> None:
        self.notify(f"Deleted key {message.key.name!r} of {message.key.owner}.", markup=False)
        self.reload()

    def action_recreate(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            # One new secret shown at a time is the point of a recreate: never in bulk.
            self.notify(
                "Recreate acts on one key: unmark the keys (Space) or use R to rotate them.",
                severity="warning",
            )
            return
        self._confirm_then(
            lambda key: ConfirmDialog(
                f"Recreate key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}. For a stolen or leaked key. The old key stops "
                "working at once, for every service; a new key with the same name and scopes "
                "is shown once.",
                "Recreate",
            ),
            lambda store, key: KeyCreated(
                store.recreate_key(key.owner, key.name, expected_public_id=key.public_id),
                recreated=True,
            ),
            key,
        )

    # --- the lifecycle: rotate with a grace, end the grace, disable / enable, expiry -----------

    def action_rotate(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            keys = self._marked_keys()
            self._bulk(
                AskValueDialog(
                    f"Rotate {counted(len(keys))}?",
                    f"{named(keys, owners=self._owners())}. Each gets a new id and secret, "
                    "shown once, one after the other; the old secrets keep working for the "
                    "grace, then every service refuses them. 0 stops them now.",
                    prompt="Grace for the old secrets (30s, 15m, 24h, 90d or 0):",
                    parse=parse_duration,
                    confirm_label=f"Rotate {len(keys)}",
                    value="24h",
                ),
                keys,
                lambda store, grace: store.rotate_keys(keys, grace=grace.value),
                "Rotated",
            )
            return

        def ask(key: KeyInfo) -> AskValueDialog[Any]:
            body = (
                f"Public id {key.public_id}. The key gets a new id and secret, shown once; same "
                "owner, name and scopes. The old secret keeps working for the grace, then every "
                "service refuses it from that second; 0 stops it now, like recreate."
            )
            if key.old_public_id is not None:
                body += f" Its older secret {key.old_public_id}, still in grace, stops at once."
            return AskValueDialog(
                f"Rotate key {key.name!r} of {key.owner}?",
                body,
                prompt="Grace for the old secret (30s, 15m, 24h, 90d or 0):",
                parse=parse_duration,
                confirm_label="Rotate",
                value="24h",
            )

        def rotate(store: KeyStore, key: KeyInfo, grace: Answer[Any]) -> Message:
            created = store.rotate_key(
                key.owner, key.name, grace=grace.value, expected_public_id=key.public_id
            )
            until = created.info.grace_until
            verb = (
                f"rotated: the old secret {key.public_id} works until "
                f"{absolute(until, seconds=True)}"
                if until is not None
                else "rotated (the old secret no longer works)"
            )
            return KeyCreated(created, verb=verb)

        self._ask_then(ask, rotate, key)

    def action_end_grace(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            now = self.session.store.clock()
            keys = [k for k in self._marked_keys() if states.in_grace(k, now)]
            if not keys:
                self.notify("No marked key has an old secret in grace.", severity="warning")
                return
            others = len(self.marked) - len(keys)
            left = f" The other {counted(others)} have no grace and stay as they are." * bool(
                others
            )
            self._bulk(
                ConfirmDialog(
                    f"End the grace of {counted(len(keys))}?",
                    f"{named(keys, owners=self._owners())}. Their old secrets stop working now, "
                    f"for every service; the current ones keep working.{left}",
                    f"End {len(keys)} graces",
                ),
                keys,
                lambda store, _: store.end_grace_of_keys(keys),
                "Ended the grace of",
            )
            return

        def ask(key: KeyInfo) -> ConfirmDialog:
            assert key.grace_until is not None
            retiring = absolute(key.grace_until, seconds=True)
            return ConfirmDialog(
                f"End the grace of key {key.name!r} of {key.owner}?",
                f"Its old secret {key.old_public_id} (retiring at {retiring}) "
                f"stops working now, for every service. The current secret {key.public_id} "
                "keeps working.",
                "End grace",
            )

        def end(store: KeyStore, key: KeyInfo) -> Message:
            info = store.end_grace(key.owner, key.name, expected_public_id=key.public_id)
            return KeyLifecycleChanged(
                info, f"The old secret {key.old_public_id} of {key.name!r} stopped working."
            )

        self._confirm_then(ask, end, key)

    def _reason_dialog(self, title: str, body: str, confirm: str) -> AskValueDialog[Any]:
        return AskValueDialog(
            title,
            body,
            prompt="Reason, for the audit trail (optional):",
            parse=check_reason,
            confirm_label=confirm,
            max_length=DESCRIPTION_MAX,
        )

    def action_toggle_disabled(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            self._toggle_marked()
            return
        key = self.selected_key() if key is None else key
        if key is not None and key.disabled:
            self._enable(key)
            return

        def ask(key: KeyInfo) -> AskValueDialog[Any]:
            return self._reason_dialog(
                f"Disable key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}. Every service refuses the key (both secrets, if it "
                "is in grace) until it is enabled again with x; its name, scopes, expiry and "
                "history stay.",
                "Disable",
            )

        def disable(store: KeyStore, key: KeyInfo, reason: Answer[Any]) -> Message:
            batch = store.disable_keys([key], reason.value.strip())
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} is disabled.")

        self._ask_then(ask, disable, key)

    def _toggle_marked(self) -> None:
        """x with marks: disable those not disabled; when every one is, enable them all."""
        marked = self._marked_keys()
        keys = [k for k in marked if not k.disabled]
        if not keys:
            self._bulk(
                ConfirmDialog(
                    f"Enable {counted(len(marked))}?",
                    f"{named(marked, owners=self._owners())}. Services accept them again (an "
                    "expired key stays expired). u undoes it, until the next change.",
                    f"Enable {len(marked)}",
                ),
                marked,
                lambda store, _: store.enable_keys(marked),
                "Enabled",
            )
            return
        others = len(marked) - len(keys)
        left = f" The other {counted(others)} are disabled already and stay so." * bool(others)
        self._bulk(
            self._reason_dialog(
                f"Disable {counted(len(keys))}?",
                f"{named(keys, owners=self._owners())}. Every service refuses them until they "
                f"are enabled again; names, scopes, expiries and history stay.{left} u undoes "
                "it, until the next change.",
                f"Disable {len(keys)}",
            ),
            keys,
            lambda store, reason: store.disable_keys(keys, reason.value.strip()),
            "Disabled",
        )

    def _enable(self, key: KeyInfo) -> None:
        def ask(key: KeyInfo) -> ConfirmDialog:
            since = absolute(key.disabled_at, seconds=True) if key.disabled_at else "unknown"
            reason = f" ({key.disabled_reason})" if key.disabled_reason else ""
            return ConfirmDialog(
                f"Enable key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}, disabled since {since}{reason}. Services accept "
                "it again (an expired key stays expired).",
                "Enable",
            )

        def enable(store: KeyStore, key: KeyInfo) -> Message:
            batch = store.enable_keys([key])
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} is enabled again.")

        self._confirm_then(ask, enable, key)

    def _expiry_dialog(self, title: str, body: str, confirm: str) -> AskValueDialog[Any]:
        """Asks for an expiry, refusing as the store would (the lifetime policy aside, which
        only the store knows: a refusal for it opens the dialog again with the text)."""
        clock = self.session.store.clock

        def parse(text: str) -> Expiry:
            expires = parse_expiry(text)
            expiry_moment(expires, clock())  # not in the future, too far: refused here already
            return expires

        return AskValueDialog(
            title,
            body,
            prompt="Expires: a span from now (90d), a date (2030-01-31) or never:",
            parse=parse,
            confirm_label=confirm,
            placeholder="90d, 2030-01-31, 2030-01-31T12:00Z or never",
        )

    def action_set_expiry(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            keys = self._marked_keys()
            self._bulk(
                self._expiry_dialog(
                    f"Set the expiry of {counted(len(keys))}?",
                    f"{named(keys, owners=self._owners())}. Services refuse each from the second "
                    "it expires. u undoes it, until the next change.",
                    f"Set {len(keys)} expiries",
                ),
                keys,
                lambda store, when: store.set_expiry_of_keys(keys, when.value),
                "Set the expiry of",
            )
            return

        def ask(key: KeyInfo) -> AskValueDialog[Any]:
            now = _expiry(key.expires_at)
            return self._expiry_dialog(
                f"Set the expiry of key {key.name!r} of {key.owner}?",
                f"Public id {key.public_id}; it {now}. Services refuse it from the second it "
                "expires. To stop it now, disable (x) or delete it.",
                "Set expiry",
            )

        def set_expiry(store: KeyStore, key: KeyInfo, when: Answer[Any]) -> Message:
            batch = store.set_expiry_of_keys([key], when.value)
            then = _expiry(batch.after[0].expires_at)
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} now {then}.")

        self._ask_then(ask, set_expiry, key)

    def on_key_lifecycle_changed(self, message: KeyLifecycleChanged) -> None:
        self.notify(message.note, markup=False)
        self.reload()
        self._reload_views()

    def on_store_failed(self, message: StoreFailed) -> None:
        repeat = message.while_loading and message.reason == self._reloading_after
        self._reloading_after = None
        if not repeat:
            self.notify(message.reason, title="Not done", severity="error", markup=False)
        if message.while_loading:
            if self._marker is None:
                empty = self.query_one("#empty", Static)
                empty.update(literal(f"Could not load keys: {message.reason}. Press F5 to retry."))
        else:
            self._reloading_after = message.reason
            self.reload()  # e.g. someone else deleted the key meanwhile: show the truth
