"""The correction modes of issue 23 (item 3) on the platform: the form takes them
(errors filed under the field), the run page's header line says them, and the
trajectory page shows the single tokens the update masked and why."""

from __future__ import annotations

import pytest

from dashboard.pages.forms import RunForm
from tests.dashboard.test_pages_form import post_for
from tests.fixtures.seed import seed_run, valid_config, write_events

pytestmark = pytest.mark.django_db

OPTIONS = {
    "algorithm.rollout_correction.kind": "token",
    "algorithm.rollout_correction.mode": "mask",
    "algorithm.rollout_correction.cap": "3",
    "algorithm.rollout_correction.lower": "0.5",
    "algorithm.kl_kind": "abs",
    "algorithm.kl_beta": "0.01",
    "algorithm.delta": "4",
    "algorithm.top_entropy_quantile": "0.2",
}


def test_the_form_takes_every_correction_option():
    form = RunForm(post_for("calc", "grpo", **OPTIONS))
    assert form.is_valid(), form.errors
    algo = form.cleaned["algorithm"]
    assert algo["rollout_correction"] == {
        "kind": "token",
        "mode": "mask",
        "cap": 3.0,
        "lower": 0.5,
    }
    assert (algo["kl_kind"], algo["delta"], algo["top_entropy_quantile"]) == (
        "abs",
        4.0,
        0.2,
    )


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("algorithm.delta", "0.5", "delta must be 0 (off) or > 1"),
        ("algorithm.top_entropy_quantile", "1.5", "less than or equal to 1"),
        ("algorithm.rollout_correction.lower", "2", "less than or equal to 1"),
        ("algorithm.rollout_correction.mode", "reject", "'truncate' or 'mask'"),
    ],
)
def test_a_bad_option_is_an_error_under_its_field(field, value, says):
    form = RunForm(post_for("calc", "grpo", **{**OPTIONS, field: value}))
    assert not form.is_valid()
    assert any(says in e for e in form.errors.get(field, [])), form.errors


def test_the_run_page_header_says_the_corrections(owner, owner_client):
    cfg = valid_config("calc", "grpo", 2)
    cfg["algorithm"].update(
        rollout_correction={
            "kind": "sequence",
            "mode": "mask",
            "cap": 3.0,
            "lower": 0.5,
        },
        delta=4.0,
        top_entropy_quantile=0.2,
        kl_beta=0.01,
        kl_kind="abs",
    )
    run = seed_run(owner, env="calc", preset="grpo", steps=2, config=cfg)
    page = owner_client.get(f"/runs/{run.pk}/").content.decode()
    assert (
        "<span data-corrections-summary>IS sequence mask [0.5, 3] · two-sided clip "
        "δ 4 · top 20% entropy tokens</span>"
    ) in page
    assert "KL abs" in page
    plain = seed_run(
        owner,
        env="calc",
        preset="grpo",
        steps=2,
        name="plain",
        config=valid_config("calc", "grpo", 2),
    )
    assert (
        "data-corrections-summary"
        not in owner_client.get(f"/runs/{plain.pk}/").content.decode()
    )


def _trajectory(masked):
    action = {
        "turn": 0,
        "kind": "action",
        "role": "assistant",
        "text": "abcd",
        "token_ids": [5, 6, 7, 8],
        "tokens": ["a", "b", "c", "d"],
        "logprob": [-1.0, -1.0, -1.0, -1.0],
        "old_logprob": [-1.0, -1.0, -1.0, -1.0],
        "ratio": [1.0, 1.0, 1.0, 1.0],
        "entropy": [0.1, 2.0, 0.2, 3.0],
        "advantage": [1.0, 1.0, 1.0, 1.0],
        "mask": None,
        "masked": masked,
    }
    prompt = {
        **action,
        "kind": "prompt",
        "role": "user",
        "text": "pq",
        "token_ids": [1, 2],
        "tokens": ["p", "q"],
        "mask": "prompt",
        "masked": [],
    }
    for name in ("logprob", "old_logprob", "ratio", "entropy", "advantage"):
        prompt[name] = [None, None]
    return {
        "type": "trajectory",
        "step": 1,
        "group": 0,
        "index": 0,
        "task_id": "t",
        "dropped": False,
        "reward": 1.0,
        "advantage": 1.0,
        "rewards": {"total": 1.0, "components": {}, "per_step": {}},
        "num_turns": 1,
        "length": 4,
        "truncated": False,
        "facts": {},
        "segments": [prompt, action],
    }


def test_the_trajectory_page_shows_the_masked_tokens_and_why(owner, owner_client):
    run = seed_run(
        owner,
        env="calc",
        preset="grpo",
        steps=2,
        done=0,
        config=valid_config("calc", "grpo", 2),
    )
    hostile = "<img src=x onerror=alert(1)>"
    write_events(
        run,
        iter(
            [
                {"type": "step", "step": 1, "metrics": {"reward": 1.0}},
                _trajectory(
                    [
                        [0, "low_entropy"],
                        [2, "low_entropy"],
                        [1, "is_ratio"],
                        [9, "is_ratio"],
                        [3, hostile],
                    ]
                ),
            ]
        ),
    )
    html = owner_client.get(f"/runs/{run.pk}/trajectories/1/0/0/").content.decode()
    badge = html[html.index("data-seg-masked") :]
    badge = badge[: badge.index("</span>")]
    # Position 9 is past the segment's 4 tokens: dropped at ingest.
    assert "tokens masked: 2 low_entropy, 1 is_ratio, 1 &lt;img" in badge
    assert hostile not in html  # escaped in the badge and in the page data
    start = html.index('id="heatmap-data"') if 'id="heatmap-data"' in html else None
    data = html[start:] if start is not None else html
    assert '[[0, "low_entropy"], [2, "low_entropy"], [1, "is_ratio"], [3,' in data
