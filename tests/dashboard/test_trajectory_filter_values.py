"""A trajectories filter that is no number says so, as ``?step=abc`` does: a
newcomer's ``?reward_min=abc`` was silently no filter, with a "Clear" button beside
empty fields."""

from __future__ import annotations

import pytest
from dashtest import client_for

from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(owner):
    return seed_run(owner, name="swarm", env="swarm", steps=3, alert_every=5)


@pytest.mark.parametrize("value", ["abc", "nan", "1e999", "-inf", "0x10", "1,5"])
@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("reward_min", "Reward ≥"),
        ("reward_max", "Reward ≤"),
        ("length_min", "Length ≥"),
        ("length_max", "Length ≤"),
    ],
)
def test_each_numeric_filter_explains_a_value_that_is_no_number(
    owner, run, name, label, value
):
    c = client_for(owner)
    url = f"/runs/{run.pk}/trajectories/?step=3"
    everything = c.get(url).content.decode()
    html = c.get(f"{url}&{name}={value}").content.decode()
    # Named as the link has it and as the form labels it.
    assert f"{name}: “{value}” is not a number; the {label} filter is off." in html
    assert f'data-filter-error="{name}"' in html
    assert f'name="{name}" value="{value}" aria-invalid="true"' in html
    # the filter is off: the same rollouts as with none
    assert html.count('class="rollout"') == everything.count('class="rollout"') > 0


def test_good_and_blank_values_say_nothing_and_several_bad_ones_each_say_so(owner, run):
    c = client_for(owner)
    url = f"/runs/{run.pk}/trajectories/?step=3"
    for query in ("reward_min=0.5&length_max=40", "reward_min=&length_min=", ""):
        html = c.get(f"{url}&{query}").content.decode()
        assert "data-filter-errors" not in html and "aria-invalid" not in html
    html = c.get(f"{url}&reward_min=abc&length_max=1e999&sign=pos").content.decode()
    assert "“abc” is not a number; the Reward ≥ filter is off." in html
    assert "“1e999” is not a number; the Length ≤ filter is off." in html
    escaped = c.get(f"{url}&reward_max=<b>x").content.decode()
    assert "“&lt;b&gt;x” is not a number" in escaped and "<b>x" not in escaped


def test_a_range_no_rollout_can_be_in_says_so(owner, run):
    c = client_for(owner)
    html = c.get(f"/runs/{run.pk}/trajectories/?step=3&reward_min=0.3&reward_max=0.1")
    assert "reward_min: 0.3 is above reward_max 0.1, so no rollout passes both." in (
        html.content.decode()
    )
    fine = c.get(f"/runs/{run.pk}/trajectories/?step=3&reward_min=0.1&reward_max=0.3")
    assert "no rollout passes both" not in fine.content.decode()
