"""Repair advice with nothing to click, and words that contradicted the evidence:

* ``length_drift`` said "add overlong_penalty in Clone and edit" and left the rest to
  the user. On one of the user's own runs it now names the penalty, sized to the run's
  generation budget as the ``dapo`` preset sizes it, and offers a button that opens
  the clone form with it added and a notice saying why; the launch records the repair
  (the alert and the weight added). An external run gets the text only, so does a
  run someone else owns; a run whose reward has the penalty already is told so;
* ``no_learning_signal`` said "every group's rewards are equal" whatever the evidence:
  with the threshold lowered to 50%, 60% of the groups were, and the others still
  taught the run something. The words now come from the evidence's numbers."""

from __future__ import annotations

from html import unescape

import pytest

from dashboard.models import Alert, Run
from tests.dashboard.dashtest import client_for
from tests.dashboard.test_pages_form import as_post, body
from tests.fixtures.seed import valid_config

pytestmark = pytest.mark.django_db

STEP = 12


def _run(owner, preset: str = "grpo", **rollout) -> Run:
    config = valid_config("calc", preset, 40, name="drifting")
    config["rollout"] = {**config.get("rollout", {}), **rollout}
    run = Run.objects.create(
        owner=owner, name="<b>drifting</b>", config=config, status="succeeded"
    )
    Alert.objects.create(run=run, step=STEP, detector="length_drift",
                         message="length drift: truncated 5% -> 60%",
                         evidence={"truncated_early": 0.05, "truncated_late": 0.6})  # fmt: skip
    return run


def _details(html: str, detector: str) -> str:
    start = html.index(f'id="alert-{detector}-')
    return html[start : html.index("</details>", start)]


def test_length_drift_offers_a_clone_with_the_overlong_penalty(owner):
    run = _run(owner, max_turns=3, max_action_tokens=10, max_total_tokens=512)
    html = _details(client_for(owner).get(f"/runs/{run.pk}/").content.decode(),
                    "length_drift")  # fmt: skip
    href = f'href="/runs/{run.pk}/clone/?repair=length_drift&amp;step={STEP}"'
    assert href in html and "data-repair-add-open" in html
    assert "Clone with overlong_penalty added" in html
    # Its size: the run's generation budget, 3 turns x 10 tokens; a fifth as the soft zone.
    assert (
        "<code>overlong_penalty</code> at weight <strong>1.0</strong>, max_len 30 "
        "(this run's generation budget: 3 turns × 10 tokens), cache 6" in html
    )
    assert "growing longer stops paying" in html
    assert "add <code>overlong_penalty</code> in Clone and edit" not in html


def test_the_button_opens_the_clone_form_with_it_added_and_its_launch_records_it(
    owner, enqueued
):
    run = _run(owner, max_turns=2, max_action_tokens=300, max_total_tokens=400)
    client = client_for(owner)
    page = client.get(f"/runs/{run.pk}/clone/?repair=length_drift&step={STEP}")
    assert page.status_code == 200, page.content.decode()[:2000]
    html = page.content.decode()
    notice = html[html.index("data-repair-notice") :]
    notice = notice[: notice.index("</p>")]
    assert "Repairing <code>length_drift</code> (the alert at step 12)" in notice
    assert "no reward weight removes it, a length penalty does" in notice
    # 2 x 300 tokens is more than the whole 400: the budget is the 400.
    assert (
        "max_len 400 (the parent's generation budget: its 400 tokens in all)" in notice
    )
    assert "cache 80" in notice and "growing longer stops paying" in notice
    assert "data-whatif-notice" not in html  # no what-if weights involved
    assert 'name="repair.detector" value="length_drift"' in html
    assert f'name="repair.alert_step" value="{STEP}"' in html
    assert "&lt;b&gt;drifting&lt;/b&gt; (repair: length drift)" in html
    diff = html[html.index("data-diff>") : html.index("data-diff-empty")]
    assert "overlong_penalty" in diff
    values = page.context["form"].values
    i = next(k.split(".")[2] for k, v in values.items()
             if k.endswith(".name") and v == "overlong_penalty")  # fmt: skip
    assert values[f"reward.components.{i}.params.max_len"] == 400

    data = as_post(values, name="repaired")
    data["repair.detector"], data["repair.alert_step"] = "length_drift", str(STEP)
    r = client.post(f"/runs/{run.pk}/clone/", body(data))
    assert r.status_code == 302, r.content.decode()[:3000]
    clone = Run.objects.get(name="repaired")
    assert clone.parent_id == run.pk
    assert clone.repair == {
        "detector": "length_drift",
        "alert_step": STEP,
        "weights": {"overlong_penalty": 1.0},
    }
    added = [c for c in clone.config["reward"]["components"]
             if c["name"] == "overlong_penalty"]  # fmt: skip
    assert added and added[0]["params"] == {"max_len": 400, "cache": 80}
    # The parent's other components are as they were.
    parent = {c["name"]: c["weight"] for c in run.config["reward"]["components"]}
    mine = {c["name"]: c["weight"] for c in clone.config["reward"]["components"]}
    assert mine == {**parent, "overlong_penalty": 1.0}


def test_external_and_other_peoples_runs_get_the_text_only(owner, staff):
    run = _run(owner)
    html = _details(client_for(staff).get(f"/runs/{run.pk}/").content.decode(),
                    "length_drift")  # fmt: skip
    assert "data-repair-add-open" not in html
    assert "add <code>overlong_penalty</code> in Clone and edit" in html
    url = f"/runs/{run.pk}/clone/?repair=length_drift&step={STEP}"
    assert client_for(staff).get(url).status_code == 403

    external = Run.objects.create(
        owner=owner, name="trl", external=True, framework="trl", status="running",
        config={"learning_rate": 1e-6},
    )  # fmt: skip
    Alert.objects.create(run=external, step=3, detector="length_drift",
                         message="lengths drift", evidence={})  # fmt: skip
    html = client_for(owner).get(f"/runs/{external.pk}/").content.decode()
    assert "an overlong penalty to the reward of the trainer" in html
    assert "data-repair-add" not in html
    assert (
        client_for(owner)
        .get(f"/runs/{external.pk}/clone/?repair=length_drift&step=3")
        .status_code
        == 400
    )


def test_a_run_whose_reward_has_the_penalty_is_told_so(owner):
    """By its algorithm (DAPO's overlong shaping adds it, unseen in the form) or by
    its own reward (where the form shows its max_len and weight)."""
    run = _run(owner, preset="dapo")  # DAPO adds the overlong penalty itself
    html = _details(client_for(owner).get(f"/runs/{run.pk}/").content.decode(),
                    "length_drift")  # fmt: skip
    assert "data-repair-add" not in html
    said = unescape(html)
    assert "this run's algorithm adds <code>overlong_penalty</code> already" in said
    assert "add the component yourself in Clone and edit" in said
    # One the run's own reward holds: its max_len and weight are in the form.
    mine = _run(owner, max_turns=3, max_action_tokens=10)
    mine.config["reward"]["components"].append(
        {
            "name": "overlong_penalty",
            "weight": 0.5,
            "params": {"max_len": 25, "cache": 5},
        }
    )
    mine.save()
    said = client_for(owner).get(f"/runs/{mine.pk}/").content.decode()
    said = unescape(_details(said, "length_drift"))
    assert "data-repair-add" not in said
    assert "this run's reward has <code>overlong_penalty</code> already" in said
    r = client_for(owner).get(f"/runs/{run.pk}/clone/?repair=length_drift&step={STEP}")
    assert r.status_code == 400
    assert "no component added to this run's reward removes length_drift" in (
        unescape(r.content.decode())
    )


def test_a_repair_with_no_component_to_add_or_no_such_alert_is_refused(owner):
    run = _run(owner)
    c = client_for(owner)
    for query in ("repair=entropy_collapse", "repair=length_drift&step=99",
                  "repair=nonsense&step=1"):  # fmt: skip
        assert c.get(f"/runs/{run.pk}/clone/?{query}").status_code == 400, query


@pytest.mark.parametrize(
    ("evidence", "said", "unsaid"),
    [
        (
            {"zero_std_mean": 0.6, "zero_std_late": 0.7, "threshold": 0.5},
            "(60% of groups had equal rewards over its last steps (this run's "
            "threshold: 50%); the other 40% still give a learning signal: see the "
            "warning above)",
            "every group",
        ),
        (
            {"zero_std_mean": 1.0, "zero_std_late": 1.0, "threshold": 0.95},
            "(every group's rewards were equal over its last steps: see the warning "
            "above)",
            "still give",
        ),
        (
            {"zero_std_mean": 0.998, "threshold": 0.95},
            "(over 99% of groups had equal rewards",
            "every group",
        ),
        ({}, "(most groups' rewards were equal: see the warning above)", "every"),
    ],
)
def test_no_learning_signal_is_worded_from_its_evidence(owner, evidence, said, unsaid):
    run = _run(owner)
    Alert.objects.create(run=run, step=20, detector="no_learning_signal",
                         message="no learning signal: ...", evidence=evidence)  # fmt: skip
    html = _details(client_for(owner).get(f"/runs/{run.pk}/").content.decode(),
                    "no_learning_signal")  # fmt: skip
    none = html[html.index("data-repair-none") :]
    none = unescape(none[: none.index("</p>")])
    assert said in none and unsaid not in none, none
