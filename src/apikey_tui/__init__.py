"""API-key access for HTTP services: a terminal app for admins and a verifier for services."""

__version__ = "0.4.0"
