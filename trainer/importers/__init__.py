"""Importers: runs recorded elsewhere, turned into our events and sent to a dashboard.

* :mod:`.jsonl`: a saved ``events.jsonl`` (or an ``HttpSink`` spool directory), as is.
* :mod:`.verl`: verl's rollout dumps (``trainer.rollout_data_dir``) and file-logger
  metrics, converted; :class:`.verl.VerlReader` also tails a live run.
* :mod:`.shapes`: the text-only trajectory event every converter builds.
* :mod:`.command`: ``python -m trainer import`` (argument parsing and the send loop).

Everything goes through :class:`trainer.httpsink.HttpSink`. Pure: no Django.
"""
