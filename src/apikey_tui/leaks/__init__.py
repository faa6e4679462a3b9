"""Leak response: find keys where they must not be, take leak reports, stop leaked keys."""
