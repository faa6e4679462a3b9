"""The Usage view: the busiest keys, 403s, 429s, wrong secrets, keys near a limit and open
right-size proposals, live."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import timedelta

from textual import work
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.content import Content
from textual.widgets import Static

from apikey_tui.names import format_duration, printable
from apikey_tui.store.limit_use import NEAR_CHECK_MAX, NEAR_SHARE, NearLimits
from apikey_tui.store.types import DEFAULT_WINDOW
from apikey_tui.store.usage import UsageOverview
from apikey_tui.tui.fitting_footer import FittingFooter
from apikey_tui.tui.messages import StoreFailed
from apikey_tui.tui.screens.live import LiveScreen
from apikey_tui.tui.session import Session
from apikey_tui.tui.text import fit_middle, literal
from apikey_tui.tui.workers import Failure

TYPE_CHECKING = False  # the store's modules import SQLAlchemy: see tui/first_rows.py
if TYPE_CHECKING:
    from apikey_tui.store import KeyStore
    from apikey_tui.store.limit_use import NearLimit
    from apikey_tui.store.rightsizing import Proposal
    from apikey_tui.store.usage import KeyActivity

OVERVIEW_WINDOW = timedelta(days=7)  # the lists' window: this week's traffic
LIMIT = 10  # keys per list: the view is read at a glance; the CLI has every proposal
_WHO_WIDTH = 30  # an owner/name column: cut in the middle past this, like the key table's


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


def _old(count: int) -> str:
    """How many of a count came by an old secret (a recreate or rotation replaced it)."""
    return f" ({count:,} by an old secret)" if count else ""


def busiest_text(key: KeyActivity) -> str:
    """Allowed requests, and the refusals beside them when there were any."""
    parts = [_plural(key.allowed, "request") + _old(key.old_allowed)]
    if key.forbidden:
        parts.append(f"{key.forbidden:,} refused (403)" + _old(key.old_forbidden))
    if key.wrong_secret:
        parts.append(_plural(key.wrong_secret, "wrong secret") + _old(key.old_wrong_secret))
    return " · ".join(parts)


def forbidden_text(key: KeyActivity) -> str:
    """How often the key was refused, and the scope set it lacked most often (needs …)."""
    text = f"{key.forbidden:,} refused (403)" + _old(key.old_forbidden)
    if key.missing:
        text += f" · needs {' '.join(key.missing[0].missing)}"
        if len(key.missing) > 1:
            text += f" (+{len(key.missing) - 1} other)"
    return text


def wrong_secret_text(key: KeyActivity) -> str:
    """Wrong secrets presented with the key's public id: a leak or an attack signal."""
    wrong = _plural(key.wrong_secret, "wrong secret") + _old(key.old_wrong_secret)
    return f"{wrong} · public id {key.public_id}"


def limited_text(key: KeyActivity) -> str:
    """Requests refused with 429: one of the key's limits (or its owner's pool) was spent."""
    return f"{key.limited:,} refused (429)"


def near_lines(read: NearLimits, *, with_owner: bool) -> list[str]:
    """One line per key or owner's pool at NEAR_SHARE of a limit or more now (at most LIMIT),
    fullest first; why the use is unknown; and whether more keys had limits than were read."""
    if read.unknown:
        return [f"use unknown: {read.unknown}"]
    shown = read.near[:LIMIT]
    names = [
        printable(f"{n.owner}/{n.name}" if with_owner else n.name)
        if n.name is not None
        else printable(f"pool of {n.owner}")
        for n in shown
    ]
    width = min(max((len(n) for n in names), default=0), _WHO_WIDTH)
    lines = [
        f"{fit_middle(who, width)}  {_near_text(n)}" for who, n in zip(names, shown, strict=True)
    ]
    if len(read.near) > LIMIT:
        lines.append(f"… and {len(read.near) - LIMIT:,} more")
    if read.more:
        lines.append(f"(only the first {NEAR_CHECK_MAX} limited keys and pools were read)")
    return lines or ["none"]


def _near_text(near: NearLimit) -> str:
    use = near.use
    share = 100 * (use.used or 0) // use.limit.count
    return f"{use.limit}: {use.used or 0:,} used ({share} %)"


def proposal_lines(
    proposals: Sequence[Proposal], *, with_owner: bool, total: int | None
) -> list[str]:
    """One line per proposal (drop …, keep …), at most LIMIT, and the count of the rest (total:
    how many there are; None while they are counted)."""
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
    if total is None and len(proposals) > LIMIT:
        lines.append("… and more (counting them): apikey-tui keys rightsize")
    elif total is not None and total > LIMIT:
        lines.append(f"… and {total - LIMIT:,} more: apikey-tui keys rightsize")
    return lines


PROPOSALS = "proposals"  # the worker group of the proposals' read


UsageData = tuple[UsageOverview, NearLimits]


class UsageScreen(LiveScreen[UsageData]):
    """U (or `:usage`) opens this from the key table or a key; Escape goes back.

    The three lists are read first (they follow the week's traffic), the proposals after in
    their own worker: the first page (milliseconds), then, if there are more, their count (a
    walk of every key: seconds at a million keys), so nothing shown waits for the count. Use
    moves the change marker all the time: a read is never started while the same read runs,
    only one more after it.
    """

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.overview: UsageOverview | None = None
        self.near: NearLimits | None = None
        self.proposals: tuple[Proposal, ...] | None = None  # the first LIMIT + 1
        self.proposal_count: int | None = None  # None while counting
        self._reading = self._proposing = False
        self._read_again = self._propose_again = False

    def compose(self) -> ComposeResult:
        owner = self.session.owner
        whose = "every owner" if owner is None else f"keys of {owner}"
        yield self.context_line(f"Usage · {whose}")
        with VerticalScroll(id="usage-body"):
            week = format_duration(OVERVIEW_WINDOW)
            for list_id, title in (
                ("busiest", f"Busiest keys (requests in {week})"),
                ("forbidden", f"Refused with 403 in {week}: a scope they need but lack"),
                ("limited", f"Refused with 429 in {week}: a limit was spent"),
                (
                    "near",
                    f"Near a limit now ({int(NEAR_SHARE * 100)} % or more of its current window)",
                ),
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

    def reload(self) -> None:
        if self._reading:
            self._read_again = True
            return
        self._reading = True
        super().reload()

    def _read_done(self) -> None:
        self._reading = False
        if self._read_again:
            self._read_again = False
            self.reload()

    def read_store(self, store: KeyStore) -> UsageData:
        owner = self.session.owner
        # near_limits never fails on the store of counts: it says the use is unknown instead.
        return (
            store.usage_overview(OVERVIEW_WINDOW, limit=LIMIT, owner=owner),
            store.near_limits(owner=owner),
        )

    def on_store_failed(self, message: StoreFailed) -> None:
        super().on_store_failed(message)
        if message.while_loading:  # the lists' read ended: the next change may read again
            self._read_done()

    def show(self, read: UsageData) -> None:
        data, self.near = read
        self.overview = data
        with_owner = self.session.owner is None
        lists = {
            "busiest": activity_lines(data.busiest, busiest_text, with_owner=with_owner),
            "forbidden": activity_lines(data.forbidden, forbidden_text, with_owner=with_owner),
            "limited": activity_lines(data.limited, limited_text, with_owner=with_owner),
            "near": near_lines(self.near, with_owner=with_owner),
            "wrong-secret": activity_lines(
                data.wrong_secret, wrong_secret_text, with_owner=with_owner
            ),
        }
        for list_id, lines in lists.items():
            self._fill(list_id, lines)
        self.show_status()
        self._read_done()
        self._propose()

    def _fill(self, list_id: str, lines: list[str]) -> None:
        text = Content("\n").join(literal(line) for line in lines)  # one line per key
        self.query_one(f"#usage-{list_id}", Static).update(text)

    def _propose(self) -> None:
        if self._proposing:
            self._propose_again = True
            return
        self._proposing = True
        self._read_proposals()

    @work(
        thread=True,
        group=PROPOSALS,
        exit_on_error=False,
        description="Reading the right-size proposals",
    )
    def _read_proposals(self) -> None:
        """The open right-size proposals, off the event loop: the first page, then the count."""
        store, owner = self.session.store, self.session.owner
        first = store.proposals(DEFAULT_WINDOW, owner=owner, limit=LIMIT + 1)
        self.app.call_from_thread(self._proposals_read, first, None)
        if len(first) > LIMIT:  # more than the page shows: count them (as rightsize would)
            count = len(store.proposals(DEFAULT_WINDOW, owner=owner))
        else:
            count = len(first)
        self.app.call_from_thread(self._proposals_read, first, count)
        self.app.call_from_thread(self._proposals_done)

    def work_failed(self, failure: Failure) -> None:
        if failure.group == PROPOSALS:
            self._proposals_failed(failure.line())
        else:
            super().work_failed(failure)

    def _proposals_read(self, first: tuple[Proposal, ...], count: int | None) -> None:
        # A refresh keeps the last count until the new one comes: no flicker to "counting".
        self.proposals = first
        self.proposal_count = count if count is not None else self.proposal_count
        count = self.proposal_count
        with_owner = self.session.owner is None
        self._fill("proposals", proposal_lines(first, with_owner=with_owner, total=count))
        self.show_status()

    def _proposals_failed(self, message: str) -> None:
        self.notify(message, title="Not read", severity="error", markup=False)
        self._proposals_done()

    def _proposals_done(self) -> None:
        self._proposing = False
        if self._propose_again:
            self._propose_again = False
            self._propose()

    def status_text(self) -> str:
        if self.proposals is None:
            return f"top {LIMIT} of each list · reading the proposals… · live"
        if self.proposal_count is None:
            return f"top {LIMIT} of each list · counting the proposals… · live"
        proposals = _plural(self.proposal_count, "open proposal")
        return f"top {LIMIT} of each list · {proposals} · live"
