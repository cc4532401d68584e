"""Commands for operators (``manage.py serve``, ``create_token``, ``prune_runs``,
``reap_runs``, ``bootstrap_demo``): adapters like views, parsing arguments and calling
the rooms' services (``runs``, ``ingest``, ``site``); they hold no logic of their own.

May import: every room but ``api`` and ``pages``.
"""
