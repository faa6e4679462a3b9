"""The terminal app: the Settings → API keys tab for admins, locally or over SSH."""
