"""The Usage view: the busiest keys, 403s, wrong secrets and open right-size proposals, live."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from apikey_tui.names import format_duration, printable
from apikey_tui.store import KeyStore
from apikey_tui.store.usage import DEFAULT_WINDOW, KeyActivity, Proposal, Rightsizing, UsageOverview
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.key_table import fit_middle
from apikey_tui.tui.screens.live import LiveScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import literal

OVERVIEW_WINDOW = timedelta(days=7)  # the lists' window: this week's traffic
LIMIT = 10  # keys per list: the view is read at a glance; the CLI has every proposal
_WHO_WIDTH = 30  # an owner/name column: cut in the middle past this, like the key table's
UsageData = tuple[UsageOverview, Rightsizing]


def _who(owner: str, name: str, *, with_owner: bool, width: int) -> str:
    text = printable(f"{owner}/{name}" if with_owner else name)
    return fit_middle(text, width)


def _plural(count: int, word: str) -> str:
    return f"{count:,} {word}{'' if count == 1 else 's'}"


def activity_lines(
    keys: Sequence[KeyActivity], say: Callable[[KeyActivity], str], *, with_owner: bool
) -> list[str]:
    """One line per key: who (cut to a common width), then what `say` says of it."""
    if not keys:
        return ["none"]
    names = [printable(f"{k.owner}/{k.name}" if with_owner else k.name) for k in keys]
    width = min(max(len(n) for n in names), _WHO_WIDTH)
    return [f"{_who(k.owner, k.name, with_owner=with_owner, width=width)}  {say(k)}" for k in keys]


def busiest_text(key: KeyActivity) -> str:
    """Allowed requests, and the refusals beside them when there were any."""
    parts = [_plural(key.allowed, "request")]
    if key.forbidden:
        parts.append(f"{key.forbidden:,} refused (403)")
    if key.wrong_secret:
        parts.append(_plural(key.wrong_secret, "wrong secret"))
    return " · ".join(parts)


def forbidden_text(key: KeyActivity) -> str:
    """How often the key was refused, and the scope set it lacked most often (needs …)."""
    text = f"{key.forbidden:,} refused (403)"
    if key.missing:
        text += f" · needs {' '.join(key.missing[0].missing)}"
        if len(key.missing) > 1:
            text += f" (+{len(key.missing) - 1} other)"
    return text


def wrong_secret_text(key: KeyActivity) -> str:
    """Wrong secrets presented with the key's public id: a leak or an attack signal."""
    return f"{_plural(key.wrong_secret, 'wrong secret')} · public id {key.public_id}"


def proposal_lines(proposals: Sequence[Proposal], *, with_owner: bool) -> list[str]:
    """One line per proposal (drop …, keep …), at most LIMIT and a count of the rest."""
    if not proposals:
        return ["none"]
    shown = proposals[:LIMIT]
    names = [
        printable(f"{p.info.owner}/{p.info.name}" if with_owner else p.info.name) for p in shown
    ]
    width = min(max(len(n) for n in names), _WHO_WIDTH)
    lines = [
        f"{_who(p.info.owner, p.info.name, with_owner=with_owner, width=width)}  "
        f"drop {' '.join(p.drop)} · keep {' '.join(p.keep)}"
        for p in shown
    ]
    if len(proposals) > LIMIT:
        lines.append(f"… and {len(proposals) - LIMIT:,} more: apikey-tui keys rightsize")
    return lines


class UsageScreen(LiveScreen[UsageData]):
    """U (or `:usage`) opens this from the key table or a key; Escape goes back."""

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.data: UsageData | None = None

    def compose(self) -> ComposeResult:
        owner = self.session.owner
        whose = "every owner" if owner is None else f"keys of {owner}"
        yield self.context_line(f"Usage · {whose}")
        with VerticalScroll(id="usage-body"):
            week = format_duration(OVERVIEW_WINDOW)
            for list_id, title in (
                ("busiest", f"Busiest keys (requests in {week})"),
                ("forbidden", f"Refused with 403 in {week}: a scope they need but lack"),
                ("wrong-secret", f"Wrong secrets in {week} (a leak or attack signal)"),
                (
                    "proposals",
                    f"Right-size proposals (scopes unused for {format_duration(DEFAULT_WINDOW)})",
                ),
            ):
                yield Static(title, classes="section")
                yield Static("Loading…", id=f"usage-{list_id}", classes="usage-list")
        yield Static("", id="status")
        yield FittingFooter()

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#usage-body", VerticalScroll).focus()

    def read_store(self, store: KeyStore) -> UsageData:
        owner = self.session.owner
        overview = store.usage_overview(OVERVIEW_WINDOW, limit=LIMIT, owner=owner)
        return overview, store.rightsize(DEFAULT_WINDOW, owner=owner)

    def show(self, data: UsageData) -> None:
        self.data = data
        overview, rightsizing = data
        with_owner = self.session.owner is None
        lists = {
            "busiest": activity_lines(overview.busiest, busiest_text, with_owner=with_owner),
            "forbidden": activity_lines(overview.forbidden, forbidden_text, with_owner=with_owner),
            "wrong-secret": activity_lines(
                overview.wrong_secret, wrong_secret_text, with_owner=with_owner
            ),
            "proposals": proposal_lines(rightsizing.proposals, with_owner=with_owner),
        }
        for list_id, lines in lists.items():
            text = Content("\n").join(literal(line) for line in lines)  # one line per key
            self.query_one(f"#usage-{list_id}", Static).update(text)
        self.show_status()

    def status_text(self) -> str:
        if self.data is None:
            return ""
        proposals = len(self.data[1].proposals)
        return f"top {LIMIT} of each list · {_plural(proposals, 'open proposal')} · live"
