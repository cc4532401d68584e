"""Launching a repair: a clone of a hacked run with the reward weights that remove the
hack's incentive (the repair loop: alert -> evidence -> what-if -> clone).

``check_*`` validates, :func:`do_launch_repair` (the API) launches through
``services.launch_run`` with the parent linked and ``Run.repair`` recording what it
repairs (the detector, the alert's step, the weights); the what-if's own button opens
the clone form filled by :func:`reweighted_config` instead, whose launch records the
same through :func:`clone_repair` (``dashboard.pages.launch``). The clone's page reads
``Run.repair`` to compare the hack's statistic in both runs (``dashboard.reads.repair``).
Only the run's owner may launch one: staff, who may read every run, get 403.
"""

from __future__ import annotations

from typing import Any

from dashboard.errors import Forbidden, InvalidConfig
from dashboard.models import Alert, Run
from dashboard.runs import services


def check_owner(user: Any, run: Run) -> None:
    if run.owner_id != getattr(user, "pk", None):
        raise Forbidden("run: only its owner may launch a clone of it with new weights")


def reward_of(run: Run) -> tuple[str, Any]:
    """(environment, reward config) of one of our runs, or InvalidConfig."""
    env, rcfg, _ = _reward_and_budget(run)
    return env, rcfg


def _reward_and_budget(run: Run) -> tuple[str, Any, int]:
    """(environment, reward config, generation budget) of one of our runs."""
    from pydantic import ValidationError

    from trainer.config import TrainConfig
    from trainer.runner import generation_budget, reward_config_for

    if run.external:
        raise InvalidConfig(
            "run: an external run trains elsewhere; change the weights in its trainer"
        )
    try:
        cfg = TrainConfig.model_validate(run.config)
        return cfg.env.name, reward_config_for(cfg), generation_budget(cfg)
    except (ValidationError, ValueError, TypeError) as exc:
        raise InvalidConfig(
            f"run: its config is not a trainer config ({str(exc).splitlines()[0]})"
        ) from None


def check_alert(run: Run, detector: Any, step: Any) -> dict[str, Any]:
    """What the clone repairs: ``{"detector", "alert_step"}`` of an alert stored for
    ``run`` (both None: a clone that repairs no alert in particular)."""
    from rewards.detectors import DETECTORS

    if detector is None and step is None:
        return {}
    if not isinstance(detector, str) or detector not in DETECTORS.in_order():
        raise InvalidConfig(
            f"detector: must be one of {', '.join(DETECTORS.in_order())}"
        )
    if step is None:
        alert = Alert.objects.filter(run=run, detector=detector).order_by("step")
        found = alert.first()
        if found is None:
            raise InvalidConfig(f"detector: this run has no {detector} alert")
        return {"detector": detector, "alert_step": found.step}
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**31:
        raise InvalidConfig("alert_step: must be a step number")
    if not Alert.objects.filter(run=run, detector=detector, step=step).exists():
        raise InvalidConfig(
            f"alert_step: this run has no {detector} alert at step {step}"
        )
    return {"detector": detector, "alert_step": step}


def reweighted_config(
    source: Run, weights: Any
) -> tuple[dict[str, Any], dict[str, float]]:
    """(``source``'s config with these reward base weights, the weights checked): a
    weight for a component it lacks adds it. The clone API launches it; the clone
    form (``/runs/<id>/clone/?weights=...``, opened from the what-if) shows it."""
    from rewards import repair

    env, rcfg, budget = _reward_and_budget(source)
    known = [c.key for c in rcfg.components]
    can_add = repair.addable(env, [c.name for c in rcfg.components], budget)
    if not isinstance(weights, dict) or not weights:
        raise InvalidConfig("weights: name at least one component and its weight")
    checked, errors = repair.check_weights(weights, known, can_add)
    if errors:
        raise InvalidConfig(errors)
    reward = repair.reweighted(rcfg.model_dump(mode="json"), checked, budget)
    return services.merge_overrides(source.config, {"reward": reward}), checked


def repair_name(source: Run, what: dict[str, Any]) -> str:
    """A repair clone's default name: its parent's, and what it repairs (a plain
    what-if clone, with no alert: "reweighted")."""
    detector = what.get("detector")
    if not detector:
        return f"{source.name} (reweighted)"[:200]
    return f"{source.name} (repair: {detector.replace('_', ' ')})"[:200]


def changed_weights(source: Run, config: dict[str, Any]) -> dict[str, float]:
    """The reward base weights ``config`` sets otherwise than ``source`` (or adds)."""
    from trainer.config import TrainConfig
    from trainer.runner import reward_config_for

    _, old = reward_of(source)
    before = {c.key: c.weight for c in old.components}
    new = reward_config_for(TrainConfig.model_validate(config))
    return {c.key: c.weight for c in new.components if before.get(c.key) != c.weight}


def clone_repair(
    user: Any, source: Run, config: dict[str, Any], detector: Any, alert_step: Any
) -> dict[str, Any]:
    """``Run.repair`` of a clone of ``source`` launched from the clone form opened by
    an alert's what-if: the alert it repairs and the weights the form's config
    changes (whatever the user made of the suggested ones)."""
    check_owner(user, source)
    what = check_alert(source, detector, alert_step)
    return {**what, "weights": changed_weights(source, config)}


def do_launch_repair(
    user: Any,
    source: Run,
    weights: Any,
    *,
    detector: Any = None,
    alert_step: Any = None,
    name: Any = None,
) -> Run:
    """A new run: ``source``'s config with these reward weights (a weight for a
    component it lacks adds it), linked to ``source`` as its parent."""
    check_owner(user, source)
    config, checked = reweighted_config(source, weights)
    what = check_alert(source, detector, alert_step)
    return services.launch_run(
        user,
        config,
        name=services.check_name(name) or repair_name(source, what),
        parent=source,
        repair={**what, "weights": checked},
    )
