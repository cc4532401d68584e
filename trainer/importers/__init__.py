"""Importers: runs recorded elsewhere, turned into our events and sent to a dashboard.

* :mod:`.jsonl`: a saved ``events.jsonl`` (or an ``HttpSink`` spool directory), as is.
* :mod:`.verl`: verl's rollout dumps (``trainer.rollout_data_dir``) and file-logger
  metrics, converted; :class:`.verl.VerlReader` also tails a live run.
* :mod:`.wandb_import`: W&B run directories (a ``wandb/`` folder: each run once),
  read by :class:`.wandb_dir.WandbReader` (records -> events, also tailing a live run)
  over :mod:`.wandb_log` (the transaction log's framing); :mod:`.wandb_tables` turns
  logged tables into trajectories. Decoding records needs ``requirements-wandb.txt``.
* :mod:`.shapes`: the text-only trajectory event every converter builds.
* :mod:`.command`: ``python -m trainer import`` (argument parsing and the send loop).

Everything goes through :class:`trainer.httpsink.HttpSink`. Pure: no Django.
"""
