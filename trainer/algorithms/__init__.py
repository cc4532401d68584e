"""The public math API (stable: outside scripts call exactly these names)."""
