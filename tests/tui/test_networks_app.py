"""Networks in the app: the detail's rules, mode, would-be refusals and proposal; N applies it
(audited, undone by u); the filter finds keys by their mode."""

from __future__ import annotations

from textual.widgets import Static

from apikey_tui.db.models import MINUTE, USAGE_FROM, USAGE_SHADOW, usage_minute
from apikey_tui.networks import SHADOW, network_rules
from apikey_tui.store import KeyQuery, KeyStore
from apikey_tui.tui.dialogs.confirm import ConfirmDialog
from apikey_tui.tui.screens.key_detail import KeyDetailScreen
from tests.tui.conftest import Toasts, make_app
from tests.tui.test_app import SIZE, settle
from tests.tui.test_usage_app import record
from tests.tui.test_views import open_detail, shown


def used_from(store: KeyStore, name: str, *networks: str, shadow: str = "") -> None:
    """Record the key's use from these networks (and one would-be refusal), as a verifier does."""
    public_id = store.get_key("alice", name).public_id
    minute = usage_minute(store.clock()) - 5
    rows = [(public_id, minute, MINUTE, USAGE_FROM, n, 1) for n in networks]
    if shadow:
        rows.append((public_id, minute, MINUTE, USAGE_SHADOW, shadow, 7))
    record(store, rows)


async def test_the_detail_shows_rules_refusals_and_the_proposal(tui_store: KeyStore) -> None:
    """A key in shadow mode shows its rules, its owner's, its would-be refusals and the
    proposal that covers the networks it was used from."""
    tui_store.create_key(
        "alice", "placed", ["project"], networks=network_rules(["10.0.0.0/8"], mode=SHADOW)
    )
    tui_store.set_owner_networks("alice", network_rules([], ["192.0.2.0/24"]))
    used_from(tui_store, "placed", "10.1.2.0/24", "10.1.3.0/24", shadow="203.0.113.0/24 /orders")
    app = make_app(tui_store)
    async with app.run_test(size=SIZE) as pilot:
        await open_detail(pilot)
        fields = shown(app, "#detail-fields")
        assert "Networks     shadow: allow 10.0.0.0/8" in fields
        assert "and the owner's: enforce: allow any; deny 192.0.2.0/24" in fields
        assert "would refuse 7 from 203.0.113.0/24 /orders" in fields
        assert "proposal (30 d): 10.1.2.0/23 · N applies it (shadow)" in fields
        assert "N networks" in shown(app, "#status")
        offered = {c.title for c in app.get_system_commands(app.screen)}
        assert "Apply networks proposal" in offered


async def test_n_applies_the_proposal_in_shadow_audited_and_u_undoes_it(
    tui_store: KeyStore,
) -> None:
    """N asks, naming the networks; yes sets them in shadow mode (a key.networks event), and u
    puts back what the key had (anywhere)."""
    tui_store.create_key("alice", "learner", ["project"])
    used_from(tui_store, "learner", "198.51.100.0/24", "2001:db8:0:100::/56")
    app = make_app(tui_store)
    toasts = Toasts()
    async with app.run_test(size=SIZE, message_hook=toasts.hook) as pilot:
        await open_detail(pilot)
        assert "proposal (30 d): 198.51.100.0/24 2001:db8:0:100::/56" in shown(
            app, "#detail-fields"
        )
        await pilot.press("N")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "shadow: allow 198.51.100.0/24, 2001:db8:0:100::/56" in body
        await pilot.press("y")
        await settle(pilot)
        rules = tui_store.get_key("alice", "learner").networks
        assert rules is not None and rules.mode == SHADOW
        assert [str(c) for c in rules.allow] == ["198.51.100.0/24", "2001:db8:0:100::/56"]
        assert tui_store.events(1)[0].action == "key.networks"
        assert isinstance(app.screen, KeyDetailScreen)
        assert shown(app, "#status").startswith("u undo networks change of learner of alice · ")
        await pilot.press("u")
        assert isinstance(app.screen, ConfirmDialog)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "its networks go back to anywhere" in body
        await pilot.press("y")
        await settle(pilot)
    assert tui_store.get_key("alice", "learner").networks is None
    assert toasts.messages[-1].startswith("Undid the networks change of learner of alice")


def test_the_filter_finds_keys_by_their_network_mode(tui_store: KeyStore) -> None:
    """'shadow' and 'enforce' (or 'enf') find keys by their own mode, as the app's / does."""
    tui_store.create_key("alice", "a", ["project"], networks=network_rules(["10.0.0.0/8"]))
    tui_store.create_key(
        "alice", "b", ["project"], networks=network_rules(["10.0.0.0/8"], mode=SHADOW)
    )
    tui_store.create_key("alice", "c", ["project"])

    def names(text: str) -> list[str]:
        return [k.name for k in tui_store.list_keys("alice", text)]

    assert names("shadow") == ["b"]
    assert names("enf") == ["a"]
    # Too short to name a mode: only a key whose random public id holds "sh" matches it (free
    # text; it failed about one run in twenty when it expected none).
    by_id = [k.name for k in tui_store.list_keys("alice", "") if "sh" in k.public_id]
    assert names("sh") == by_id
    assert tui_store.count_keys(KeyQuery("alice", "shadow")) == 1
