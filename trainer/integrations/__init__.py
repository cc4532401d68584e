"""Callbacks for other trainers (TRL) that report to a dashboard through ``HttpSink``.

Each module imports its framework lazily, so importing ``trainer`` never needs it."""
