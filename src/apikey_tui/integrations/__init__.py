"""Thin adapters from web frameworks to the verifier; no framework is a package dependency."""
