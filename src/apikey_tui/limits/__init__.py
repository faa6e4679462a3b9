"""Limits per key and per owner: N requests per epoch-aligned window, leased from a shared store."""

from apikey_tui.limits.decisions import ADMITTED, Admitted, Decision, Refused, Unavailable
from apikey_tui.limits.limiter import LEASE_DEFAULT, Lease, Limiter, lease_size
from apikey_tui.limits.model import (
    AppliedLimit,
    Limit,
    check_limits,
    format_limit,
    limits_of_text,
    limits_text,
    parse_limit,
    window_of,
)
from apikey_tui.limits.modes import FailMode, Outage, parse_fail_mode
from apikey_tui.limits.port import Grant, LimitStore

__all__ = [
    "ADMITTED",
    "LEASE_DEFAULT",
    "Admitted",
    "AppliedLimit",
    "Decision",
    "FailMode",
    "Grant",
    "Lease",
    "Limit",
    "LimitStore",
    "Limiter",
    "Outage",
    "Refused",
    "Unavailable",
    "check_limits",
    "format_limit",
    "lease_size",
    "limits_of_text",
    "limits_text",
    "parse_fail_mode",
    "parse_limit",
    "window_of",
]
