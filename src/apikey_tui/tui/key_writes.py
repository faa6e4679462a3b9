"""Every write on keys, as one object the key table's screen holds: each asks first, naming the
keys, runs one store call off the event loop, and offers undo where it can; on one key, or on
every marked key as one batch."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from textual.notifications import SeverityLevel
from textual.screen import Screen

from apikey_tui.errors import ApiKeyError, KeyNotFoundError
from apikey_tui.names import (
    DESCRIPTION_MAX,
    check_owner,
    check_reason,
    counted,
    parse_duration,
    read_expiry,
)
from apikey_tui.store import states
from apikey_tui.store.metadata import pairs_words
from apikey_tui.store.types import DEFAULT_WINDOW
from apikey_tui.tui.dialogs.ask_value import Answer, AskValueDialog
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.dialogs.create_key import CreateKeyDialog, NewKeyRequest, parse_limits
from apikey_tui.tui.dialogs.edit_scopes import EditScopesDialog, ScopeChange
from apikey_tui.tui.dialogs.reveal_secret import RevealSecretDialog, copy_note
from apikey_tui.tui.key_table import Identity
from apikey_tui.tui.messages import BatchDone, KeyCreated, KeyDeleted, KeyLifecycleChanged
from apikey_tui.tui.session import Session
from apikey_tui.tui.textual_private import forget_clipboard
from apikey_tui.tui.times import WINDOW, absolute
from apikey_tui.tui.undo_words import (
    change_of,
    comes_back,
    limits_words,
    networks_words,
    parse_tags,
    undoable_words,
)
from apikey_tui.tui.workers import Failure, StoreRunner

if TYPE_CHECKING:  # the store's modules import SQLAlchemy: see tui/first_rows.py
    from apikey_tui.names import Expiry
    from apikey_tui.store import Batch, KeyInfo, KeyStore, ScopeInfo
    from apikey_tui.store.network_use import NetworkUse
    from apikey_tui.store.rightsizing import Proposal

R = TypeVar("R")
Written = KeyCreated | KeyDeleted | KeyLifecycleChanged | BatchDone  # what a write returns
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


class KeysView(Protocol):
    """What the writes need from the key table's screen (KeysScreen)."""

    def selected_key(self) -> KeyInfo | None:
        """The key under the cursor, if any."""
        ...

    def show_keys(self) -> None:
        """Redraw the table's status (marks, undo)."""
        ...

    def show_marks(self) -> None:
        """Draw the marks (KeyWrites.marked) in the table, and the status."""
        ...

    def reload_keys(self) -> None:
        """Read the keys, the catalog and an open key detail again now (after a write)."""
        ...

    def go_to(self, identity: Identity) -> None:
        """Put the cursor on a key (a new one)."""
        ...

    def focus_keys(self) -> None:
        """Give the table the focus back (a reveal closed)."""
        ...


class KeyWrites:
    """Every write on keys, one object the key table's screen holds (KeysScreen.writes).

    Each asks first, naming the keys, runs one store call (StoreRunner) and offers undo where
    it can; with `None` for the key it acts on the table's marked keys, or its selected one.
    The key detail asks through the same methods, typed (`KeyDetailScreen`'s `KeyRequests`),
    so one place asks, writes and offers undo.
    """

    def __init__(self, screen: Screen[Any], view: KeysView, session: Session) -> None:
        self.screen = screen
        self.view = view
        self.session = session
        self.runner = StoreRunner(screen, session)
        self.scopes: list[ScopeInfo] = []  # the catalog the scope editor offers
        self.marked: dict[Identity, KeyInfo] = {}  # Space marks: actions then act on them all

    def _notify(self, message: str, *, severity: SeverityLevel = "information") -> None:
        self.screen.notify(message, severity=severity, markup=False)

    # --- running a write ----------------------------------------------------------------------

    def _run(
        self,
        operation: Callable[[KeyStore], R],
        doing: str,
        done: Callable[[R], None],
        *,
        again: Callable[[ApiKeyError], None] | None = None,
    ) -> None:
        """Run one store call off the event loop; it ends the offer of undo.

        again: on the store refusing the value asked for (an expiry past the lifetime policy),
        reopen the dialog with what was typed instead of a toast.
        """
        self.runner.run(operation, doing, done, again=again)
        self.view.show_keys()

    def failed(self, failure: Failure) -> None:
        """A write failed (the screen's worker boundary hands it here)."""
        self.runner.failed(failure)

    def _reveal_closed(self, _: object = None) -> None:
        # The secret must live nowhere once the reveal is closed, the app's copy of the
        # clipboard included (Textual keeps what it copied; it has no public way to forget it).
        forget_clipboard(self.screen.app)
        self.view.focus_keys()

    # --- create -------------------------------------------------------------------------------

    def create(self, dialog: CreateKeyDialog) -> None:
        """Ask with dialog; on Create, one store call. A refusal (an expiry past the lifetime
        policy, the name taken meanwhile) opens the dialog again as it was filled in."""

        def answered(request: NewKeyRequest | None) -> None:
            if request is None:
                return
            owner, name = request.owner, request.name

            def create(store: KeyStore) -> KeyCreated:
                created = store.create_key(
                    owner, name, request.scopes, expires=request.expires, limits=request.limits
                )
                return KeyCreated(created)

            self._run(
                create,
                f"Create (key {name!r} of {owner})",
                self._created,
                again=lambda error: self.create(dialog.again(request, error)),
            )

        self.screen.app.push_screen(dialog, answered)

    def _created(self, message: KeyCreated) -> None:
        """A key was created, recreated or rotated: show its secret once."""
        self.view.reload_keys()
        key = message.created.info
        if not message.recreated and message.verb is None:  # a new key: the cursor goes to it
            self.view.go_to((key.owner, key.name))
        self.screen.app.push_screen(
            RevealSecretDialog(message.created, recreated=message.recreated, verb=message.verb),
            self._reveal_closed,
        )

    # --- asking first -------------------------------------------------------------------------

    def _confirm_then(
        self,
        ask: Callable[[KeyInfo], ConfirmDialog],
        then: Callable[[KeyStore, KeyInfo], Written],
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
        then: Callable[[KeyStore, KeyInfo, Any], Written],
        key: KeyInfo | None = None,
    ) -> None:
        """_confirm_then for a dialog that answers with a value (None, False: no)."""
        key = self.view.selected_key() if key is None else key  # a key's detail view passes its own
        if key is None:
            self._notify("Select a key in the table first.", severity="warning")
            return
        chosen = key

        def operation(store: KeyStore, answer: object) -> Written:
            try:
                return then(store, chosen, answer)
            except KeyNotFoundError as exc:
                raise ApiKeyError(f"{exc}: it was deleted meanwhile; nothing was done") from None

        self._ask(ask(key), operation, f"key {key.name!r} of {key.owner}")

    def _ask(
        self,
        dialog: ConfirmDialog | AskValueDialog[Any],
        operation: Callable[[KeyStore, Any], Written],
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

                def again(error: ApiKeyError) -> None:
                    self._ask(value_dialog.again(typed.text, str(error)), operation, what)

            self._run(
                lambda store: operation(store, answer),
                f"{dialog.confirm_label} ({what})",
                self._written,
                again=again,
            )

        self.screen.app.push_screen(dialog, answered)

    def _written(self, result: Written) -> None:
        """A write committed: say what it did, read the keys again, offer undo, show secrets."""
        if isinstance(result, KeyCreated):
            self._created(result)
        elif isinstance(result, KeyDeleted):
            self._notify(f"Deleted key {result.key.name!r} of {result.key.owner}.")
            self.view.reload_keys()
        elif isinstance(result, KeyLifecycleChanged):
            self._notify(result.note)
            self.view.reload_keys()
        else:
            self._batch_done(result)

    # --- marks: Space marks keys; d, x, E, R and O then act on every marked key --------------

    def toggle_mark(self, key: KeyInfo) -> None:
        """Mark key, or unmark it."""
        identity = (key.owner, key.name)
        if self.marked.pop(identity, None) is None:
            self.marked[identity] = key
        self.view.show_marks()

    def unmark_all(self) -> None:
        """M: unmark every marked key (the cursor stays)."""
        if not self.marked:
            self._notify("No key is marked (Space marks one).", severity="warning")
            return
        self.marked.clear()
        self.view.show_marks()

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

        def operation(store: KeyStore, answer: object) -> Written:
            batch = run(store, answer)
            return BatchDone(batch, f"{done} {counted(len(batch.after))}: {named(batch.after)}.")

        self._ask(dialog, operation, counted(len(keys)))

    def _owners(self) -> bool:
        """Whether confirmations name owners too (the table shows every owner's keys)."""
        return self.session.owner is None

    def _batch_done(self, message: BatchDone) -> None:
        batch = message.batch
        note = message.note
        from apikey_tui.store import UNDOABLE  # the store's bulk module: after the first paint

        if batch.action in UNDOABLE:
            self.session.undoable = batch
            note += " Press u to undo."
        if len(batch.after) > 1 or self.marked:
            self.marked.clear()
            self.view.show_marks()
        self._notify(note)
        self.view.reload_keys()
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

        self.screen.app.push_screen(RevealSecretDialog(first, verb=verb), closed)

    # --- undo ---------------------------------------------------------------------------------

    def undo(self) -> None:
        """Undo the last reversible change, whichever key it was made on."""
        batch = self.session.undoable
        if batch is None:
            self._notify(
                f"Nothing to undo: only the last {undoable_words()} change can be "
                "(an offboarding: u in :owners)."
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
                "disabled or not (with the same time and reason), expiry, scopes and limits."
            )
        change = change_of(batch)
        dialog = ConfirmDialog(
            f"Undo the {change}?",
            f"{body} Refused, and nothing is done, if {'it' if len(keys) == 1 else 'any of them'}"
            " changed since.",
            "Undo",
        )

        def operation(store: KeyStore, _: object) -> Written:
            return BatchDone(store.undo(batch), f"Undid the {change}.")

        self._ask(dialog, operation, f"undo of {counted(len(keys))}")

    # --- scopes -------------------------------------------------------------------------------

    def edit_scopes(self, key: KeyInfo, catalog: list[ScopeInfo]) -> None:
        """Edit one key's scopes (the detail's e) from catalog; confirmed, then one batch that
        u undoes."""
        self.screen.app.push_screen(EditScopesDialog(key, catalog), self._scopes_chosen)

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

        def operation(store: KeyStore, _: object) -> Written:
            batch = store.set_scopes_of_keys([key], change.scopes)
            scopes = " ".join(batch.after[0].scopes)
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} now has: {scopes}.")

        self._ask(dialog, operation, f"key {key.name!r} of {key.owner}")

    # --- limits -------------------------------------------------------------------------------

    def edit_limits(self, key: KeyInfo) -> None:
        """Replace one key's limits (the detail's L): typed as `keys set-limits` takes them;
        one audited batch that u undoes. A set the store refuses reopens the dialog as typed."""

        def ask(key: KeyInfo) -> AskValueDialog[Any]:
            return AskValueDialog(
                f"Set the limits of key {key.name!r} of {key.owner}?",
                f"Now: {limits_words(key.limits)}. Each limit is N requests per window "
                "(600/m, 10000/d), at most one per window length; none (or blank) lifts them. "
                "Services apply the new limits at their next check; a window's use so far "
                "counts against a limit of the same window. u undoes it, until the next change.",
                prompt="Limits (N/DURATION each, or none):",
                parse=parse_limits,
                confirm_label="Set limits",
                value=" ".join(map(str, key.limits)),
                placeholder="600/m 10000/d, or none",
            )

        def set_limits(store: KeyStore, key: KeyInfo, limits: Answer[Any]) -> Written:
            batch = store.set_limits_of_keys([key], limits.value)
            now = limits_words(batch.after[0].limits)
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} now has the limits {now}.")

        self._ask_then(ask, set_limits, key)

    def apply_networks(self, key: KeyInfo, use: NetworkUse) -> None:
        """Set the networks proposal in shadow mode (the detail's N): the CLI's `keys networks
        --apply` path; one audited batch that u undoes."""
        from apikey_tui.store.network_use import proposed_rules

        rules = proposed_rules(use)
        more = (
            " Verifiers saw more networks than they record: some would be refused."
            if use.more
            else ""
        )
        dialog = ConfirmDialog(
            f"Allow key {key.name!r} of {key.owner} only from where it was used?",
            f"{rules.summary(4)}: the smallest list covering the {len(use.came_from)} networks "
            f"it was used from in the last {use.days} days.{more} In shadow mode: requests from "
            "elsewhere still pass and are listed here as would-be refusals. Now: "
            f"{networks_words(key)}. u undoes it, until the next change.",
            "Apply networks",
        )

        def operation(store: KeyStore, _: object) -> Written:
            batch = store.set_networks_of_keys([key], rules)
            now = networks_words(batch.after[0])
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} may now be used from {now}.")

        self._ask(dialog, operation, f"key {key.name!r} of {key.owner}")

    # --- owners and tags (issue 30) ---------------------------------------------------------

    def transfer(self, key: KeyInfo) -> None:
        """Give one key to another owner (the detail's T): same secret and public id, so
        clients keep working; one audited batch that u undoes."""

        def ask(key: KeyInfo) -> AskValueDialog[Any]:
            return AskValueDialog(
                f"Transfer key {key.name!r} of {key.owner}?",
                "Its secret and public id stay: every client keeps working, now as the new "
                "owner's key (its metadata and limit pool apply). Its usage and history stay "
                "with it. Refused if the new owner has a key of this name. u undoes it.",
                prompt="New owner:",
                parse=check_owner,
                confirm_label="Transfer",
                placeholder="payments",
                max_length=64,
            )

        def transfer(store: KeyStore, key: KeyInfo, to: Answer[Any]) -> Written:
            batch = store.transfer_keys([key], to.value)
            return BatchDone(batch, f"Key {key.name!r} now belongs to {batch.after[0].owner}.")

        self._ask_then(ask, transfer, key)

    def edit_tags(self, key: KeyInfo) -> None:
        """Replace one key's tags (the detail's g), as `keys set-tags` takes them; u undoes."""

        def ask(key: KeyInfo) -> AskValueDialog[Any]:
            return AskValueDialog(
                f"Set the tags of key {key.name!r} of {key.owner}?",
                f"Now: {pairs_words(key.tags) or 'none'}. KEY=VALUE words for filters "
                "(tag:env=prod); services never see them. none (or blank) clears them.",
                prompt="Tags (KEY=VALUE each, or none):",
                parse=parse_tags,
                confirm_label="Set tags",
                value=pairs_words(key.tags),
                placeholder="env=prod team=payments",
            )

        def set_tags(store: KeyStore, key: KeyInfo, tags: Answer[Any]) -> Written:
            batch = store.set_tags_of_keys([key], tags.value)
            now = pairs_words(batch.after[0].tags) or "none"
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} now has the tags {now}.")

        self._ask_then(ask, set_tags, key)

    def apply_rightsize(self, proposal: Proposal) -> None:
        """Ask, naming the key and the scopes to drop; then the CLI's `rightsize --apply` path."""
        key = proposal.info
        dialog = ConfirmDialog(
            f"Drop {' '.join(proposal.drop)} from key {key.name!r} of {key.owner}?",
            f"It used none of them in the last {WINDOW}; it keeps: {' '.join(proposal.keep)}. "
            "Services see the narrower key at once: a request that needs a dropped scope is "
            "refused (403). Recorded as a key.rightsize event.",
            "Drop scopes",
        )

        def operation(store: KeyStore, _: object) -> Written:
            info = store.apply_proposal(proposal, DEFAULT_WINDOW)
            scopes = " ".join(info.scopes)
            return KeyLifecycleChanged(info, f"Key {key.name!r} of {key.owner} now has: {scopes}.")

        self._ask(dialog, operation, f"key {key.name!r} of {key.owner}")

    # --- copy ---------------------------------------------------------------------------------

    def copy_name(self, key: KeyInfo | None = None) -> None:
        self._copy(key, "name", "y")

    def copy_public_id(self, key: KeyInfo | None = None) -> None:
        self._copy(key, "public id", "Y")

    def _copy(self, key: KeyInfo | None, what: str, again: str) -> None:
        """Copy a key's name or public id (never its secret) and say truly where it went."""
        key = self.view.selected_key() if key is None else key
        if key is None:
            self._notify("Select a key in the table first.", severity="warning")
            return
        text = key.name if what == "name" else key.public_id
        self.screen.app.copy_to_clipboard(text)
        note = copy_note(again=again)
        self._notify(
            f"The {what} {text}: {note.text}",
            severity="information" if note.can_arrive else "warning",
        )

    # --- delete and recreate ------------------------------------------------------------------

    def delete(self, key: KeyInfo | None = None) -> None:
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

    def recreate(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            # One new secret shown at a time is the point of a recreate: never in bulk.
            self._notify(
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

    def rotate(self, key: KeyInfo | None = None) -> None:
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

        def rotate(store: KeyStore, key: KeyInfo, grace: Answer[Any]) -> Written:
            created = store.rotate_key(
                key.owner, key.name, grace=grace.value, expected_public_id=key.public_id
            )
            until = created.info.grace_until
            verb = (
                f"rotated: the old secret (id {key.public_id}) works until "
                f"{absolute(until, seconds=True)}"
                if until is not None
                else "rotated (the old secret no longer works)"
            )
            return KeyCreated(created, verb=verb)

        self._ask_then(ask, rotate, key)

    def end_grace(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            now = self.session.store.clock()
            keys = [k for k in self._marked_keys() if states.in_grace(k, now)]
            if not keys:
                self._notify("No marked key has an old secret in grace.", severity="warning")
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

        def end(store: KeyStore, key: KeyInfo) -> Written:
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

    def toggle_disabled(self, key: KeyInfo | None = None) -> None:
        if key is None and self.marked:
            self._toggle_marked()
            return
        key = self.view.selected_key() if key is None else key
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

        def disable(store: KeyStore, key: KeyInfo, reason: Answer[Any]) -> Written:
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

        def enable(store: KeyStore, key: KeyInfo) -> Written:
            batch = store.enable_keys([key])
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} is enabled again.")

        self._confirm_then(ask, enable, key)

    def _expiry_dialog(self, title: str, body: str, confirm: str) -> AskValueDialog[Any]:
        """Asks for an expiry, refusing as the store would (the lifetime policy aside, which
        only the store knows: a refusal for it opens the dialog again with the text)."""
        clock = self.session.store.clock

        def parse(text: str) -> Expiry:
            return read_expiry(text, clock())

        return AskValueDialog(
            title,
            body,
            prompt="Expires: a span from now (90d), a date (2030-01-31) or never:",
            parse=parse,
            confirm_label=confirm,
            placeholder="90d, 2030-01-31, 2030-01-31T12:00Z or never",
        )

    def set_expiry(self, key: KeyInfo | None = None) -> None:
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

        def set_expiry(store: KeyStore, key: KeyInfo, when: Answer[Any]) -> Written:
            batch = store.set_expiry_of_keys([key], when.value)
            then = _expiry(batch.after[0].expires_at)
            return BatchDone(batch, f"Key {key.name!r} of {key.owner} now {then}.")

        self._ask_then(ask, set_expiry, key)
