"""Importers: runs recorded elsewhere, turned into our events and sent to a dashboard.

* :mod:`.jsonl`: a saved ``events.jsonl`` (or an ``HttpSink`` spool directory), as is.
* :mod:`.verl`: verl's rollout dumps (``trainer.rollout_data_dir``) and file-logger
  metrics, converted; :class:`.verl.VerlReader` also tails a live run.
* :mod:`.wandb_import`: W&B run directories (a ``wandb/`` folder: each run once),
  read by :class:`.wandb_dir.WandbReader` (records -> events, also tailing a live run)
  over :mod:`.wandb_log` (the transaction log's framing); :mod:`.wandb_tables` turns
  logged tables into trajectories. Decoding records needs ``requirements-wandb.txt``.
* :mod:`.trl_output`: TRL's ``output_dir`` (completions parquet, TensorBoard scalars).
* :mod:`.tensorboard`: TensorBoard event files, read without TensorFlow.
* :mod:`.primerl`, :mod:`.miles`, :mod:`.tinker`: those trainers' run directories,
  per-token arrays kept where the layout has them.
* :mod:`.shapes`: the trajectory and step events every converter builds.
* :mod:`.tailing`: reading files another process is still writing.
* :mod:`.command`: ``python -m trainer import`` (argument parsing and the send loop).

Everything goes through :class:`trainer.httpsink.HttpSink`. Pure: no Django.
"""
