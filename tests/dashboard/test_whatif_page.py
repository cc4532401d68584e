"""The what-if panel on the page: what it says (its words are static/js/whatif_text.js,
run here under node): a change to or from 0 is not called a sign flip, a cut list of
examples says "15 of N shown", and "τ —" says why; its clone button opens the clone
form filled with the new weights, to review and then launch, and that launch records
the alert it repairs."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from dashboard.models import Run
from tests.dashboard.dashtest import client_for
from tests.dashboard.test_pages_form import as_post, body
from tests.fixtures.hacked import seed_spurious

NODE = shutil.which("node")
TEXT_JS = Path(__file__).resolve().parents[2] / "static" / "js" / "whatif_text.js"
needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed (the panel's words are JavaScript)"
)


def js(code: str) -> Any:
    """What ``code`` (a function body, whatif_text.js's exports as ``t``) returns."""
    script = (
        f"import * as t from {json.dumps(TEXT_JS.as_uri())};\n"
        f"const out = (() => {{ {code} }})();\n"
        "process.stdout.write(JSON.stringify(out));\n"
    )
    done = subprocess.run(
        [NODE, "--input-type=module", "-e", script],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


TOTAL = {
    "trajectories": 72, "sign_flips": 7, "sign_reversed": 1, "sign_to_zero": 4,
    "sign_from_zero": 2, "token_flip_share": 0.1, "groups": 18, "best_changes": 3,
    "tau_mean": 0.5, "tau_groups": 18,
}  # fmt: skip


# --- the words ------------------------------------------------------------------------
@needs_node
def test_a_change_to_or_from_zero_is_said_as_such_not_as_a_sign_flip():
    out = js(
        f"const total = {json.dumps(TOTAL)};"
        "return [t.summary(total),"
        " t.summary({...total, sign_flips: 3, sign_reversed: 3, sign_to_zero: 0,"
        "   sign_from_zero: 0}),"
        " ['reversed', 'to_zero', 'from_zero'].map("
        "   (flip) => t.exampleLabel('sign_flip', {flip})),"
        " t.exampleLabel('best_change', {})];"
    )
    summary, reversals, labels, best = out
    assert "7 of 72 trained trajectories change their advantage's sign (+, 0 or −)" in (
        summary
    )
    assert "1 reversed, 4 to 0 (no push any more), 2 from 0" in summary
    assert "flip advantage sign" not in summary
    assert "trajectories change their advantage's sign (+, 0 or −): 3 reversed · " in (
        reversals
    )  # no "0 to 0"
    assert labels == [
        "advantage sign reversed",
        "advantage to 0 (its push gone)",
        "advantage from 0 (a new push)",
    ]
    assert best == "best rollout changes"


@needs_node
def test_weights_that_change_no_direction_say_so_first():
    same = {**TOTAL, "sign_flips": 0, "sign_reversed": 0, "sign_to_zero": 0,
            "sign_from_zero": 0, "best_changes": 0, "tau_mean": 1}  # fmt: skip
    out = js(
        f"return [{json.dumps(same)}, {json.dumps({**same, 'tau_mean': 0.9})},"
        f" {json.dumps(TOTAL)}].map((x) => t.summary(x))"
        f".concat([t.summary({json.dumps(same)}, false)]);"
    )
    assert out[0].startswith("No direction changes: every advantage keeps its sign")
    assert "how hard each rollout is pushed, not which way · 0 of 72" in out[0]
    # Not with tau below 1, nor for the run's own weights (nothing changes at all).
    assert not any("No direction changes" in s for s in out[1:])


@needs_node
def test_a_run_with_nothing_recorded_says_so_not_that_nothing_changes():
    nothing = {**TOTAL, "trajectories": 0, "sign_flips": 0, "sign_reversed": 0,
               "sign_to_zero": 0, "sign_from_zero": 0, "token_flip_share": 0,
               "groups": 0, "best_changes": 0, "tau_mean": None, "tau_groups": 0}  # fmt: skip
    out = js(f"return t.summary({json.dumps(nothing)});")
    assert out.startswith("Nothing to recompute yet: this run has no recorded rollouts")
    assert "0 of 0" not in out


@needs_node
def test_tau_says_what_it_is_over_and_why_it_is_a_dash():
    none = {**TOTAL, "tau_mean": None, "tau_groups": 0}
    some = {**TOTAL, "tau_mean": 0.25, "tau_groups": 12}
    empty = {**none, "groups": 0}
    out = js(
        f"return [{json.dumps(none)}, {json.dumps(some)}, {json.dumps(empty)},"
        f" {json.dumps(TOTAL)}].map(t.tauText);"
    )
    assert out[0].startswith("mean Kendall τ — (none: ")
    assert "totals were all equal, before or after" in out[0]
    assert out[1] == (
        "mean Kendall τ 0.25 over 12 of 18 groups "
        "(the other 6 had all their totals tied before or after)"
    )
    assert "no whole group of rollouts was recomputed" in out[2]
    assert out[3] == "mean Kendall τ 0.5 over 18 groups"


@needs_node
def test_a_cut_list_of_examples_says_how_many_of_how_many():
    counts = {"sign_flip": 40, "best_change": 12, "rank_change": 35}
    out = js(
        f"const counts = {json.dumps(counts)};"
        "return [t.shownText({example_counts: counts}, 15, 5),"
        " t.shownText({example_counts: {...counts, rank_change: 250}}, 15, 5),"
        " t.shownText({example_counts: {sign_flip: 3}}, 3, 5),"
        " t.shownText({example_counts: {sign_flip: 0}}, 0, 5)];"
    )
    cut, big, whole, none = out
    assert cut["text"].startswith("15 of 87 changes shown: the 5 largest of each kind")
    assert "(advantage 5 of 40, best rollout 5 of 12, ranking 5 of 35)" in cut["text"]
    assert (cut["more"], cut["all"]) == ("Show all 87", 40)
    assert (big["more"], big["all"]) == ("Show the 100 largest of each kind", 100)
    assert whole == {
        "text": "All 3 changes shown, the largest first within each kind.",
        "all": 0,
        "more": "",
    }
    assert none["text"] == "" and none["more"] == ""


@needs_node
def test_the_clone_address_carries_the_weights_and_the_alert_if_any():
    plain, first = js(
        "return [t.cloneHref('/runs/x/clone/', {r_parallel: 0.25}, null),"
        " t.cloneHref('/runs/x/clone/', {r_finish: 1}, {detector: 'd', step: NaN})];"
    )
    assert parse_qs(urlsplit(plain).query) == {"weights": ['{"r_parallel":0.25}']}
    # ?repair=d alone (no step in the run page's address): the detector's first alert
    assert parse_qs(urlsplit(first).query) == {
        "weights": ['{"r_finish":1}'],
        "repair": ["d"],
    }


# --- the panel and the clone form it opens ---------------------------------------------
@pytest.fixture
def hacked(owner):
    return seed_spurious(owner, steps=16, onset=6)


def alert_step(run) -> int:
    return run.alert_set.get(detector="spurious_parallelism").step


@pytest.mark.django_db
def test_the_panel_explains_tau_and_its_button_opens_the_clone_form(hacked, owner):
    html = client_for(owner).get(f"/runs/{hacked.pk}/").content.decode()
    panel = html[html.index('id="whatif"') :]
    assert f'data-clone-url="/runs/{hacked.pk}/clone/"' in panel
    assert "data-repairs-url" not in panel  # it launches nothing itself
    assert "Clone with these weights…</button>" in panel
    assert "(Kendall's tau) compares each group's ranking" in panel
    assert '"—" means no group had one' in panel
    assert "data-whatif-shown" in panel and "data-whatif-more" in panel


@pytest.mark.django_db
def test_an_external_run_of_another_trainer_has_no_what_if(owner):
    """Its config (``{}`` here) validates as our defaults: the panel offered
    components it never had, and a clone the server then refused."""
    run = Run.objects.create(
        owner=owner, name="api run", config={}, external=True, framework="trl"
    )
    client = client_for(owner)
    html = client.get(f"/runs/{run.pk}/").content.decode()
    assert 'id="whatif"' not in html
    answer = client.post(  # nor does the API make up weights for it
        f"/api/runs/{run.pk}/whatif",
        data=json.dumps({"weights": {"outcome": 0.5}}),
        content_type="application/json",
    )
    assert answer.status_code == 400, answer.content
    assert "trained by trl" in answer.content.decode()


@pytest.mark.django_db
def test_an_external_run_of_ours_recomputes_but_offers_no_clone(owner):
    run = Run.objects.create(
        owner=owner, name="ours", config={}, external=True, framework="agentic-rl"
    )
    html = client_for(owner).get(f"/runs/{run.pk}/").content.decode()
    panel = html[html.index('id="whatif"') :]
    assert "data-whatif-run" in panel and "data-whatif-clone" not in panel
    assert "trained elsewhere: it cannot be cloned here" in panel


@needs_node
@pytest.mark.django_db
def test_the_clone_form_is_filled_with_the_weights_and_its_launch_records_the_repair(
    hacked, owner, enqueued
):
    step = alert_step(hacked)
    href = js(
        "return t.cloneHref("
        f"{json.dumps(f'/runs/{hacked.pk}/clone/')}, {{r_finish: 1}},"
        f" {{detector: 'spurious_parallelism', step: {step}}});"
    )
    query = parse_qs(urlsplit(href).query)
    assert query == {
        "weights": ['{"r_finish":1}'],
        "repair": ["spurious_parallelism"],
        "step": [str(step)],
    }
    client = client_for(owner)
    page = client.get(href)
    assert page.status_code == 200, page.content.decode()[:2000]
    html = page.content.decode()
    assert "<h1>Clone and edit</h1>" in html
    assert 'name="repair.detector" value="spurious_parallelism"' in html
    assert f'name="repair.alert_step" value="{step}"' in html
    assert "Repairing <code>spurious_parallelism</code>" in html
    assert "(repair: spurious parallelism)" in html  # the name it is given
    # r_finish, which the run lacked, is a component row of the form, at 1.0, and the
    # changes from the parent are listed before any typing.
    row = html[html.index('value="r_finish" selected') :]
    index = row[row.index('name="reward.components.') :].split(".")[2]
    weight = html[html.index(f'name="reward.components.{index}.weight"') :]
    assert 'value="1.0"' in weight[: weight.index(">")]
    diff = html[html.index("data-diff>") : html.index("data-diff-empty")]
    assert "r_finish" in diff

    # The user reviews, lowers the weight to 0.8 and launches.
    from dashboard.pages import forms as f
    from dashboard.runs.repair import reweighted_config

    config, _ = reweighted_config(hacked, {"r_finish": 1.0})
    values = f.values_from_config(f.normalise(config))
    index = next(
        k.split(".")[2]
        for k, v in values.items()
        if k.startswith("reward.components.")
        and k.endswith(".name")
        and v == "r_finish"
    )
    data = as_post(
        values, name="repaired", **{f"reward.components.{index}.weight": "0.8"}
    )
    data["repair.detector"] = "spurious_parallelism"
    data["repair.alert_step"] = str(step)
    r = client.post(f"/runs/{hacked.pk}/clone/", body(data))
    assert r.status_code == 302, r.content.decode()[:3000]
    clone = Run.objects.get(name="repaired")
    assert clone.parent_id == hacked.pk
    assert clone.repair == {
        "detector": "spurious_parallelism",
        "alert_step": step,
        "weights": {"r_finish": 0.8},
    }
    # Its page compares it with its parent, as the API's repair clones do.
    assert 'id="repair"' in client.get(f"/runs/{clone.pk}/").content.decode()


@pytest.mark.django_db
def test_weights_without_an_alert_fill_the_form_and_launch_a_plain_clone(
    hacked, owner, enqueued
):
    client = client_for(owner)
    html = client.get(
        f"/runs/{hacked.pk}/clone/", {"weights": json.dumps({"r_parallel": 0.25})}
    ).content.decode()
    assert "repair.detector" not in html
    assert "The reward weights below are the what-if's" in html
    assert "(reweighted)" in html and "(repair:" not in html  # no alert involved
    assert (
        "r_parallel" in html[html.index("data-diff>") : html.index("data-diff-empty")]
    )


@pytest.mark.parametrize(
    ("query", "status", "error"),
    [
        ({"weights": "{nope"}, 400, "weights: must be a JSON object"),
        ({"weights": "[" * 3000}, 400, "weights: must be a JSON object"),
        ({"weights": '{"\\ud800": 1}'}, 400, "weights.?: must not contain lone"),
        ({"weights": '{"r_finish": NaN}'}, 400, "weights.r_finish"),
        ({"weights": '{"r_finish": ' + "9" * 5000 + "}"}, 400, "weights"),
        ({"weights": "{}"}, 400, "weights: name at least one component"),
        ({"weights": '{"nope": 1}'}, 400, "weights.nope: unknown component"),
        (
            {
                "weights": '{"r_finish": 1}',
                "repair": "spurious_parallelism",
                "step": "x",
            },
            400,
            "alert_step: must be a step number",
        ),
        (
            {
                "weights": '{"r_finish": 1}',
                "repair": "spurious_parallelism",
                "step": "1",
            },
            400,
            "alert_step: this run has no spurious_parallelism alert at step 1",
        ),
    ],
)
@pytest.mark.django_db
def test_a_bad_address_says_what_is_wrong(hacked, owner, query, status, error):
    r = client_for(owner).get(f"/runs/{hacked.pk}/clone/", query)
    assert r.status_code == status
    assert error in r.content.decode()


@pytest.mark.django_db
def test_only_the_owner_opens_a_repair_and_others_see_nothing(hacked, staff, other):
    query = {"weights": '{"r_finish": 1}', "repair": "spurious_parallelism"}
    r = client_for(staff).get(f"/runs/{hacked.pk}/clone/", query)
    assert r.status_code == 403 and "only its owner" in r.content.decode()
    assert client_for(other).get(f"/runs/{hacked.pk}/clone/", query).status_code == 404
