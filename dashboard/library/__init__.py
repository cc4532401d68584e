"""The user's own models and data: the roots a run on the platform may read
(:mod:`~dashboard.library.roots`, ``MODEL_ROOTS``/``DATA_ROOTS``), the model
directories found under them for the picker (:mod:`~dashboard.library.model_dirs`)
and uploaded datasets (:mod:`~dashboard.library.datasets`: check, store, preview).

May import: ``site`` and the root modules, and the pure ``trainer`` readers; no other
room. Every path it answers with has been resolved inside a root.
"""
