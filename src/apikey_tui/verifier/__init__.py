"""The service-facing verifier: check `Authorization: ApiKey <key>` and the scopes it grants.

Only re-exports (httpx's habit): the check itself is in `checker`.
"""

from apikey_tui.verifier.checker import Caller, Verifier

__all__ = ["Caller", "Verifier"]
