"""The correction modes (issue 23, item 3) in a real browser: a run trained two steps
by the real loop with top_entropy_quantile 0.25 shows its settings in the header line
and, on a trajectory, the tokens the update left out hatched, with the reason on
hover and a count in the segment's label."""

from __future__ import annotations

import pytest
from conftest import login, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TRAIN = """
import json
from django.contrib.auth import get_user_model
from django.utils import timezone
from dashboard.ingest import writer
from dashboard.models import Run
from dashboard.pages.forms import normalise
from tests.trainer.conftest import outcome_and_format
from trainer.config import TrainConfig
from trainer.envs.base import make_env
from trainer.events import ListSink
from trainer.loop import train

cfg = TrainConfig.model_validate({
    "steps": 2, "env": {"name": "calc"}, "model": {"warmstart_steps": 2},
    "rollout": {"tasks_per_step": 2, "group_size": 3, "max_turns": 2},
    "algorithm": {"top_entropy_quantile": 0.25, "delta": 4.0, "kl_beta": 0.01,
                  "kl_kind": "abs",
                  "rollout_correction": {"kind": "token", "mode": "mask",
                                         "cap": 3.0, "lower": 0.5}},
})
sink = ListSink()
train(cfg, make_env("calc", seed=0), outcome_and_format, sink)
alice = get_user_model().objects.get(username="alice")
run = Run.objects.create(owner=alice, name="corrections", status="succeeded",
                         config=normalise(cfg.model_dump(mode="json")),
                         started_at=timezone.now(), finished_at=timezone.now(),
                         last_step=2)
writer.store(run.pk, [e for e in sink.events if e["type"] in ("step", "trajectory")])
print(json.dumps({"run": str(run.pk)}))
"""


def test_masked_tokens_and_the_corrections_show(scripted_live, page, shots):
    run = scripted_live.script(TRAIN)["run"]
    login(page, scripted_live.url)
    page.goto(f"{scripted_live.url}/runs/{run}/")
    summary = page.inner_text("[data-corrections-summary]")
    assert summary == (
        "IS token mask [0.5, 3] · two-sided clip δ 4 · top 25% entropy tokens"
    )
    assert "KL abs" in page.inner_text("[data-kl-summary]")
    shot(page, shots, "corrections_header", full=False)
    page.goto(f"{scripted_live.url}/runs/{run}/trajectories/1/0/0/")
    page.wait_for_selector("[data-heat] span[data-t]")
    assert "low_entropy" in page.inner_text("[data-seg-masked]").lower()
    masked = page.locator("[data-heat] span.tm[data-t]")
    # Hover a hatched token of an action (trained) segment: the reason shows.
    target = page.evaluate(
        "() => { const d = JSON.parse(document.getElementById('heatmap-data')"
        ".textContent); for (const [k, s] of d.segments.entries()) {"
        " if (!s.mask && s.masked.length) return `${k}.${s.masked[0][0]}`; } }"
    )
    assert target and masked.count() > 0
    page.locator(f"[data-heat] span[data-t='{target}']").hover()
    tip = page.inner_text("[data-tooltip]")
    assert "low_entropy: below the top-entropy quantile (not trained on)" in tip
    shot(page, shots, "corrections_masked_tokens", full=False)
