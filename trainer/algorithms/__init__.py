"""The public math API (stable: outside scripts call exactly these names).

Advantages (:mod:`.advantages`), losses and their aggregation (:mod:`.losses`), KL
estimators (:mod:`.kl`), sampler/learner correction (:mod:`.correction`), the
top-entropy token mask (:mod:`.entropy_mask`) and the
algorithm presets (:mod:`.presets`). Pure torch: no models, no I/O, no Django.
"""

from __future__ import annotations

from trainer.algorithms.advantages import (
    gae_advantages,
    group_advantages,
    process_advantages,
    zero_variance_groups,
)
from trainer.algorithms.correction import mismatch_metrics, rollout_weights
from trainer.algorithms.entropy_mask import high_entropy_mask
from trainer.algorithms.kl import KL_KINDS, adaptive_kl_coef, kl_k3, kl_penalty
from trainer.algorithms.losses import (
    LOSSES,
    agg_loss,
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
    "KL_KINDS",
    "LOSSES",
    "PRESETS",
    "PRESET_LABELS",
    "ResolvedAlgorithm",
    "adaptive_kl_coef",
    "agg_loss",
    "describe_preset",
    "gae_advantages",
    "group_advantages",
    "high_entropy_mask",
    "kl_k3",
    "kl_penalty",
    "masked_mean",
    "mismatch_metrics",
    "policy_loss",
    "process_advantages",
    "resolve_algorithm",
    "rollout_weights",
    "value_loss",
    "zero_variance_groups",
]
