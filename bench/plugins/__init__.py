"""Example plugins (see README, "Writing a plugin")."""
