"""The public math API (stable: outside scripts call exactly these names).

Advantages (:mod:`.advantages`), losses and their aggregation (:mod:`.losses`), and
the algorithm presets (:mod:`.presets`). Pure torch: no models, no I/O, no Django.
"""

from __future__ import annotations

from trainer.algorithms.advantages import (
    gae_advantages,
    group_advantages,
    process_advantages,
    zero_variance_groups,
)
from trainer.algorithms.losses import (
    LOSSES,
    agg_loss,
    kl_k3,
    masked_mean,
    policy_loss,
    value_loss,
)
from trainer.algorithms.presets import (
    PRESET_LABELS,
    PRESETS,
    ResolvedAlgorithm,
    describe_preset,
    resolve_algorithm,
)

__all__ = [
    "LOSSES",
    "PRESETS",
    "PRESET_LABELS",
    "ResolvedAlgorithm",
    "agg_loss",
    "describe_preset",
    "gae_advantages",
    "group_advantages",
    "kl_k3",
    "masked_mean",
    "policy_loss",
    "process_advantages",
    "resolve_algorithm",
    "value_loss",
    "zero_variance_groups",
]
