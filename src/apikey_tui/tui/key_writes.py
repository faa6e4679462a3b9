"""The key table's writes: each asks first, naming the keys, runs one store call off the event
loop, and offers undo where it can; on one key, or on every marked key as one batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from textual import work
from textual.message import Message
from textual.screen import Screen

from apikey_tui.errors import (
    ApiKeyError,
    InvalidInputError,
    KeyNotFoundError,
    LifetimePolicyError,
)
from apikey_tui.names import (
    DESCRIPTION_MAX,
    check_reason,
    counted,
    expiry_moment,
    parse_duration,
    parse_expiry,
)
from apikey_tui.store import UNDOABLE, Batch, KeyInfo, KeyStore, ScopeInfo, states
from apikey_tui.tui.dialogs.ask_value import Answer, AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog, ScopeChange
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog, copy_note
from apikey_tui.tui.failures import unforeseen
from apikey_tui.tui.key_table import Identity, KeyTable
from apikey_tui.tui.messages import (
    BatchDone,
    KeyCreated,
    KeyDeleted,
    KeyLifecycleChanged,
    StoreFailed,
    ValueRefused,
)
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.times import absolute
from apikey_tui.tui.undo_words import change_of, comes_back

if TYPE_CHECKING:
    from apikey_tui.names import Expiry

LISTED = 5  # keys a bulk confirmation names before "and N more"


def named(keys: Sequence[KeyInfo], *, owners: bool = False) -> str:
    """'a, b and c': at most LISTED names, then 'and N more'; owners adds each key's owner."""
    names = [f"{k.name} of {k.owner}" if owners else k.name for k in keys]
    shown, rest = names[:LISTED], len(names) - LISTED
    if rest > 0:
        return f"{', '.join(shown)} and {rest} more"
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} and {shown[-1]}"


def _expiry(expires_at: datetime | None) -> str:
    """'never expires', or 'expires 2030-01-31 12:00:00 UTC'."""
    return (
        "never expires" if expires_at is None else f"expires {absolute(expires_at, seconds=True)}"
    )


class KeyWrites(Screen[None]):
    """The actions that change keys; the key table (KeysScreen) says which key is selected.

    Textual finds a screen's actions on the screen, so they live on this base class; the key
    detail reaches them through `KeysScreen.act_on`, so one place asks, writes and offers undo.
    """

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.scopes: list[ScopeInfo] = []  # the catalog the scope editor offers
        self.marked: dict[Identity, KeyInfo] = {}  # Space marks: actions then act on them all

    # --- what the key table provides ----------------------------------------------------------

    def selected_key(self) -> KeyInfo | None:
        """The key under the cursor, if any."""
        raise NotImplementedError

    def show_keys(self) -> None:
        """Redraw the table's status (marks, undo)."""
        raise NotImplementedError

    def reload_keys(self) -> None:
        """Read the keys again now (after a write)."""
        raise NotImplementedError

    # --- running a write ----------------------------------------------------------------------

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

    def action_unmark_all(self) -> None:
        """M: unmark every marked key (the cursor stays)."""
        if not self.marked:
            self.notify("No key is marked (Space marks one).", severity="warning")
            return
        self.marked.clear()
        self._show_marks()

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
        self.reload_keys()
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
        if len(keys) == 1:  # say exactly what comes back, against what the key has now
            body = (
                f"Key {keys[0].name!r} of {keys[0].owner}: {comes_back(keys[0], batch.after[0])}."
            )
        else:
            body = (
                f"{named(keys, owners=True)} each get back exactly what they had before: "
                "disabled or not (with the same time and reason), expiry and scopes."
            )
        change = change_of(batch)
        dialog = ConfirmDialog(
            f"Undo the {change}?",
            f"{body} Refused, and nothing is done, if any of them changed since.",
            "Undo",
        )

        def operation(store: KeyStore, _: object) -> Message:
            return BatchDone(store.undo(batch), f"Undid the {change}.")

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
        self.reload_keys()

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
                    "shown once, one after the other, and the lifetime it had, from now; the "
                    "old secrets keep working for the grace, then every service refuses them. "
                    "0 stops them now.",
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
            if key.expires_at is not None:  # as `keys rotate` without --expires
                body += " The new secret gets the lifetime the key had, from now."
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
        self.reload_keys()
        self._reload_views()
