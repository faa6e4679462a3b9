"""Modal dialogs; each is a typed function call that dismisses with a plain value."""
