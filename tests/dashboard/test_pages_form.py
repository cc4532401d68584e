"""The new-run form: config <-> inputs, errors filed under the input that caused them,
launch and clone through the platform's services."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from django.http import QueryDict

from dashboard.models import Run
from dashboard.pages import forms as f
from dashboard.pages.forms import RunForm, default_config, normalise, values_from_config
from rewards.config import DETECTOR_NAMES
from tests.fixtures.seed import seed_run

pytestmark = pytest.mark.django_db


def as_post(values: dict, **changes) -> QueryDict:
    """What a browser submits for a form showing ``values`` (then edited)."""
    values = {**values, **changes}
    if values.get("reward.detectors.enabled") is None:  # rendered as every box ticked
        values["reward.detectors.enabled"] = list(DETECTOR_NAMES)
    q = QueryDict(mutable=True)
    for key, value in values.items():
        if value is None or value is False:
            continue  # blank inputs and unchecked boxes
        if isinstance(value, list):
            q.setlist(key, [str(v) for v in value])
        elif value is True:
            q[key] = "on"
        else:
            q[key] = str(value)
    return q


def post_for(env="calc", preset="grpo", **changes) -> QueryDict:
    return as_post(values_from_config(default_config(env, preset)), **changes)


def body(q: QueryDict) -> dict[str, list[str]]:
    """For the test client, which would keep only the last value of a QueryDict key."""
    return {k: q.getlist(k) for k in q}


def test_it_round_trips_every_environments_default_config():
    for env in ("calc", "search", "swarm"):
        form = RunForm(post_for(env, "dapo"))
        assert form.is_valid(), form.errors
        # The name is left blank: the launch names the run (services.auto_name).
        assert "name" not in form.raw
        assert form.cleaned == {**default_config(env, "dapo"), "name": "run"}


def test_a_blank_override_takes_the_presets_value_and_a_set_one_overrides_it():
    form = RunForm(post_for("calc", "dr_grpo"))
    assert form.is_valid()
    assert form.cleaned["algorithm"]["clip_high"] is None
    form = RunForm(
        post_for(
            "calc",
            "dr_grpo",
            **{"algorithm.clip_high": "0.28", "algorithm.credit": "process"},
        )
    )
    assert form.is_valid()
    assert form.cleaned["algorithm"]["clip_high"] == 0.28
    assert form.cleaned["algorithm"]["credit"] == "process"


def test_custom_weights_params_and_schedules_reach_the_config():
    form = RunForm(
        post_for(
            "swarm",
            "dr_grpo",
            **{
                "reward.components.0.weight": "2.5",
                "reward.components.0.params.budget": "12",
                "reward.components.1.schedule.kind": "linear",
                "reward.components.1.schedule.end": "0",
                "reward.components.1.schedule.steps": "40",
            },
        )
    )
    assert form.is_valid(), form.errors
    comps = form.cleaned["reward"]["components"]
    assert comps[0]["name"] == "r_perf" and comps[0]["weight"] == 2.5
    assert comps[0]["params"]["budget"] == 12
    assert comps[1]["schedule"] == {"kind": "linear", "end": 0.0, "steps": 40}


def test_errors_are_filed_under_the_input_that_caused_them():
    form = RunForm(
        post_for(
            "search",
            "grpo",
            **{
                "steps": "abc",
                "algorithm.clip_high": "99",
                "envp.search.top_k": "50",
                "reward.components.0.params.beta": "-1",
                "reward.components.1.weight": "heavy",
                "reward.components.2.schedule.kind": "linear",
                "reward.components.2.schedule.steps": "0",
            },
        )
    )
    assert not form.is_valid()
    e = form.errors
    assert e["steps"] == ["“abc” is not a whole number"]
    assert "less than or equal to 10" in e["algorithm.clip_high"][0]
    assert "less than or equal to 10" in e["envp.search.top_k"][0]
    assert "greater than 0" in e["reward.components.0.params.beta"][0]
    assert e["reward.components.1.weight"] == ["“heavy” is not a number"]
    assert e["reward.components.2.schedule.steps"] == [
        "a linear schedule needs steps >= 1"
    ]


@pytest.mark.parametrize(
    "env, changes, field, message",
    [
        ("calc", {"envp.calc.min_operand": "9", "envp.calc.max_operand": "5"},
         "envp.calc.min_operand", "must be at most max_operand (5)"),
        ("swarm", {"envp.swarm.min_cost": "9", "envp.swarm.max_cost": "2"},
         "envp.swarm.min_cost", "must be at most max_cost"),
        ("search", {"envp.search.top_k": "5", "envp.search.context_budget": "4"},
         "envp.search.top_k", "must be at most context_budget"),
    ],
)  # fmt: skip
def test_a_range_refused_by_an_environment_is_filed_under_its_field(
    env, changes, field, message
):
    # "min_operand must be <= max_operand" sat over the section, no input marked.
    form = RunForm(post_for(env, "grpo", **changes))
    assert not form.is_valid()
    assert form.errors == {field: [message]}


@pytest.mark.parametrize(
    "field, typed, message",
    [
        ("reward.components.0.weight", "0.5e", "“0.5e” is not a number"),
        ("reward.components.0.weight", "abc", "“abc” is not a number"),
        ("reward.components.0.weight", "1_0", "“1_0” is not a number"),
        ("rollout.temperature", "1e400", "“1e400” is too large to be a number"),
        ("rollout.temperature", "inf", "“inf” is not a number"),
        ("steps", "2.5", "“2.5” is not a whole number"),
        ("reward.components.0.weight", "", "Enter a number (the default is 1.0)"),
        # Python reads no int of over 4,300 digits: a 500 before the bound.
        ("steps", "9" * 5000, f"“{'9' * 20}…” is too large (18 digits at most)"),
        ("seed", "-" + "1" * 19, f"“-{'1' * 19}” is too large (18 digits at most)"),
        (
            "rollout.temperature",
            "9" * 5000,
            f"“{'9' * 20}…” is too large to be a number",
        ),
    ],
)
def test_a_number_that_is_not_one_is_refused_next_to_its_field(field, typed, message):
    # A browser's number input would have sent "" for most of these, and the default
    # (weight 1.0) would have launched in place of what the user saw.
    form = RunForm(post_for("swarm", "grpo", **{field: typed}))
    assert not form.is_valid()
    assert form.errors == {field: [message]}
    assert form.cleaned is None


def test_a_row_index_past_the_forms_own_is_no_row(owner_client):
    # The browser numbers rows 0, 1, ...: a 5,000-digit index is no row of the form's.
    data = body(post_for("calc", "grpo"))
    data["reward.components." + "9" * 5000 + ".name"] = ["outcome"]
    data["reward.judges.1.rubric." + "9" * 5000 + ".name"] = ["x"]
    r = owner_client.post(
        "/runs/new/check/",
        urlencode(data, doseq=True),
        content_type="application/x-www-form-urlencoded",
    )
    assert r.status_code == 200 and r.json()["errors"] == {}
    form = RunForm(_query(data))
    assert form.is_valid(), form.errors
    assert len(form.cleaned["reward"]["components"]) == len(
        default_config("calc", "grpo")["reward"]["components"]
    )


def _query(data: dict[str, list[str]]) -> QueryDict:
    q = QueryDict(mutable=True)
    for k, v in data.items():
        q.setlist(k, v)
    return q


def test_a_number_written_plainly_is_taken_exactly():
    form = RunForm(
        post_for(
            "swarm",
            "grpo",
            **{"reward.components.1.weight": " 5e-1 ", "rollout.temperature": ".7"},
        )
    )
    assert form.is_valid(), form.errors
    assert form.cleaned["reward"]["components"][1]["weight"] == 0.5
    assert form.cleaned["rollout"]["temperature"] == 0.7


def test_the_launch_refuses_a_mistyped_weight_and_queues_nothing(
    owner_client, enqueued
):
    r = owner_client.post(
        "/runs/new/",
        body(post_for("swarm", "grpo", **{"reward.components.1.weight": "0.5e"})),
    )
    assert r.status_code == 400
    html = r.content.decode()
    assert (
        'data-errors-for="reward.components.1.weight"><li>“0.5e” is not a number</li>'
        in html
    )
    assert 'value="0.5e"' in html  # what the user typed stays in the field
    assert not Run.objects.exists() and enqueued == []


def test_an_algorithm_conflict_is_shown_on_both_fields():
    form = RunForm(
        post_for(
            "calc",
            "grpo",
            **{"algorithm.advantage": "gae", "algorithm.credit": "outcome"},
        )
    )
    assert not form.is_valid()
    assert "algorithm.advantage" in form.errors and "algorithm.credit" in form.errors


def test_a_component_the_environment_cannot_feed_is_refused():
    form = RunForm(post_for("calc", "grpo", **{"reward.components.0.name": "fbeta"}))
    assert not form.is_valid()
    assert any("does not produce them" in m for m in form.errors["reward.components.0"])


def test_rows_removed_in_the_browser_keep_their_own_indices():
    values = values_from_config(default_config("calc"))
    moved = {}
    for key, value in values.items():  # rows 0,1,2 become 0,4,7 (two were deleted)
        for old, new in (
            ("reward.components.1.", "reward.components.4."),
            ("reward.components.2.", "reward.components.7."),
        ):
            if key.startswith(old):
                key = new + key[len(old) :]
        moved[key] = value
    form = RunForm(as_post(moved, **{"reward.components.7.weight": "x"}))
    assert not form.is_valid()
    assert list(form.errors) == ["reward.components.7.weight"]


def test_launch_creates_the_run_through_the_service_and_opens_it(
    owner_client, enqueued, commit
):
    data = post_for(
        "calc",
        "dr_grpo",
        name="custom",
        **{
            "reward.components.0.weight": "2.0",
            "reward.components.1.weight": "0.3",
        },
    )
    with commit():
        r = owner_client.post("/runs/new/", body(data))
    run = Run.objects.get()
    assert r.status_code == 302 and r["Location"] == f"/runs/{run.pk}/"
    assert run.name == "custom" and run.parent is None
    assert run.config["algorithm"]["preset"] == "dr_grpo"
    assert [c["weight"] for c in run.config["reward"]["components"]] == [2.0, 0.3, 0.1]
    assert enqueued == [(str(run.pk), run.queue)]


def test_a_run_launched_without_a_name_is_named_from_what_it_is(
    owner, owner_client, enqueued, commit
):
    page = owner_client.get("/runs/new/").content.decode()
    assert 'name="name"' in page and 'placeholder="blank: calc-grpo-N"' in page
    assert values_from_config(default_config()).get("name") is None  # shown blank
    seed_run(owner, name="calc-grpo-7", env="calc", preset="grpo", steps=2)
    names = []
    for _ in range(2):
        with commit():
            r = owner_client.post("/runs/new/", body(post_for("calc", "grpo")))
        assert r.status_code == 302
        names.append(Run.objects.latest("created_at").name)
    assert names == ["calc-grpo-8", "calc-grpo-9"]  # one past the highest so named
    run = Run.objects.latest("created_at")
    assert run.config["name"] == "calc-grpo-9"
    with commit():
        owner_client.post("/runs/new/", body(post_for("swarm", "dapo", name="mine")))
    assert Run.objects.latest("created_at").name == "mine"


def test_a_refused_launch_rerenders_with_errors_inline_and_values_kept(
    owner_client, enqueued
):
    r = owner_client.post(
        "/runs/new/",
        body(
            post_for(
                **{"algorithm.clip_high": "99", "reward.components.0.weight": "2.0"}
            )
        ),
    )
    assert r.status_code == 400
    html = r.content.decode()
    assert (
        'data-errors-for="algorithm.clip_high"><li>Input should be less than or equal to 10</li>'
        in html
    )
    assert 'value="2.0"' in html
    assert not Run.objects.exists() and enqueued == []


def test_processes_are_set_in_the_form_and_refused_beyond_the_largest_worker(
    owner_client, enqueued, settings
):
    settings.RUN_MAX_PROCESSES = 2
    r = owner_client.post("/runs/new/", body(post_for(**{"resources.processes": "4"})))
    assert r.status_code == 400
    html = r.content.decode()
    assert 'data-errors-for="resources.processes"><li>4 processes asked' in html
    assert not Run.objects.exists() and enqueued == []
    r = owner_client.post("/runs/new/", body(post_for(**{"resources.processes": "2"})))
    run = Run.objects.get()
    assert r.status_code == 302 and run.config["resources"]["processes"] == 2
    assert run.queue.endswith("-x2")


def test_the_run_limit_is_shown_as_a_form_error(
    owner, owner_client, enqueued, settings
):
    settings.RUN_MAX_ACTIVE_PER_USER = 1
    seed_run(owner, steps=2, done=1, status="running")
    r = owner_client.post("/runs/new/", body(post_for()))
    assert r.status_code == 409
    assert "already queued or running" in r.content.decode()


def test_clone_prefills_the_parent_and_records_it(owner, owner_client, enqueued):
    parent = seed_run(owner, name="parent", env="calc", preset="dr_grpo", steps=4)
    page = owner_client.get(f"/runs/{parent.pk}/clone/")
    assert page.status_code == 200 and b"Clone and edit" in page.content
    data = as_post(
        values_from_config(parent.config),
        name="child",
        **{"reward.components.0.weight": "1.5"},
    )
    r = owner_client.post(f"/runs/{parent.pk}/clone/", body(data))
    child = Run.objects.get(name="child")
    assert r.status_code == 302 and child.parent == parent
    assert child.config["reward"]["components"][0]["weight"] == 1.5


def test_the_live_check_answers_errors_and_the_diff_to_the_parent(owner, owner_client):
    parent = seed_run(owner, name="parent", env="calc", preset="dr_grpo", steps=4)
    data = as_post(
        values_from_config(parent.config),
        name="parent",
        **{"reward.components.0.weight": "1.5"},
    )
    res = owner_client.post(f"/runs/{parent.pk}/clone/check/", body(data)).json()
    assert res["ok"] is True and res["errors"] == {}
    assert res["diff"] == [
        {"path": "reward.components.outcome.weight", "parent": "1.0", "value": "1.5"}
    ]
    bad = owner_client.post("/runs/new/check/", body(post_for(**{"steps": "0"}))).json()
    assert bad["ok"] is False and "steps" in bad["errors"]


def test_the_reward_section_follows_the_environment(owner_client):
    html = owner_client.get("/runs/new/reward-section/?env=swarm").content.decode()
    assert 'value="r_perf" selected' in html and 'value="r_parallel" selected' in html
    assert "data-reward-section" in html


def test_normalise_spells_out_the_defaults():
    cfg = normalise({"env": {"name": "calc", "params": {}}, "reward": None})
    assert cfg["env"]["params"]["max_operand"] == 9
    assert cfg["reward"]["components"][0]["name"] == "outcome"


def test_held_out_evaluation_is_set_in_the_form_and_its_errors_filed_there():
    form = RunForm(
        post_for(**{"eval.every": "5", "eval.samples": "4", "eval.greedy": True})
    )
    assert form.is_valid(), form.errors
    assert form.cleaned["eval"] == {
        "every": 5,
        "tasks": 8,
        "samples": 4,
        "greedy": True,
    }
    form = RunForm(post_for(**{"eval.samples": "0"}))
    assert not form.is_valid()
    assert form.errors_for("eval.samples")


@pytest.mark.parametrize("env", ["calc", "search", "swarm"])
def test_each_environments_form_defaults_are_its_learning_config(env):
    import yaml
    from django.conf import settings

    path = settings.BASE_DIR / "bench" / "configs" / f"{env}.yaml"
    demo = yaml.safe_load(path.read_text())
    cfg = default_config(env, "grpo")
    assert cfg["model"]["warmstart_steps"] == demo["model"]["warmstart_steps"] > 0
    for key, value in demo["rollout"].items():
        assert cfg["rollout"][key] == value
    assert cfg["optim"]["lr"] == demo["optim"]["lr"] and cfg["steps"] == demo["steps"]
    assert cfg["env"]["params"] | demo["env"].get("params", {}) == cfg["env"]["params"]
    assert RunForm(initial=cfg).warmstart_hint == ""


def test_a_from_scratch_model_without_a_warm_start_gets_a_hint(owner_client):
    form = RunForm(post_for(**{"model.warmstart_steps": "0"}))
    assert "warm" in form.warmstart_hint
    with_path = RunForm(post_for(**{"model.warmstart_steps": "0", "model.path": "m"}))
    assert with_path.warmstart_hint == ""  # a pretrained model needs none
    page = owner_client.get("/runs/new/?env=swarm").content.decode()
    # The learning config has one: the hint is there for the page's script, hidden.
    assert "data-warmstart-hint hidden>" in page


# --- LoRA and the recording policy ----------------------------------------------------
def test_lora_and_recording_inputs_become_the_config():
    form = RunForm(
        post_for(
            **{
                "model.path": "/models/chat",
                "model.lora.r": "4",
                "model.lora.dropout": "0.05",
                "model.lora.target_modules": "q_proj, v_proj",
                "record.every": "5",
                "record.groups": "3",
                "record.token_arrays": False,
            }
        )
    )
    assert form.is_valid(), form.errors
    assert form.cleaned["model"]["lora"] == {
        "r": 4,
        "alpha": 16.0,  # left blank: the schema's default
        "dropout": 0.05,
        "target_modules": ["q_proj", "v_proj"],
    }
    assert form.cleaned["record"] == {"every": 5, "groups": 3, "token_arrays": False}


def test_blank_lora_inputs_mean_no_lora_and_blank_groups_mean_all():
    values = values_from_config(default_config())
    assert values["record.groups"] == "auto"  # the default, shown as such
    form = RunForm(post_for(**{"record.groups": "auto"}))
    assert form.is_valid(), form.errors
    assert form.cleaned["model"]["lora"] is None
    assert form.cleaned["record"]["groups"] == "auto"
    q = post_for()
    q["record.groups"] = ""  # the browser sends the blank input
    form = RunForm(q)
    assert form.is_valid(), form.errors
    assert form.cleaned["record"]["groups"] is None


@pytest.mark.parametrize(
    "field, typed, message",
    [
        ("model.lora.r", "4.5", "“4.5” is not a whole number"),
        ("model.lora.alpha", "big", "“big” is not a number"),
        ("record.every", "", "Enter a number (the default is 1)"),
        ("record.every", "2x", "“2x” is not a whole number"),
        ("record.groups", "Auto", "“Auto” is not a whole number or “auto”"),
        ("record.groups", "1e3", "“1e3” is not a whole number or “auto”"),
    ],
)
def test_a_mistyped_lora_or_recording_number_is_refused_next_to_it(
    field, typed, message
):
    form = RunForm(post_for(**{"model.path": "/models/chat", field: typed}))
    assert not form.is_valid()
    assert form.errors == {field: [message]}


def test_schema_refusals_of_lora_and_recording_are_filed_under_their_inputs():
    form = RunForm(
        post_for(
            **{
                "model.path": "/models/chat",
                "model.lora.r": "0",
                "model.lora.dropout": "1",
                "model.lora.target_modules": "q_proj, bad-name",
                "record.every": "0",
                "record.groups": "0",
            }
        )
    )
    assert not form.is_valid()
    e = form.errors
    assert "greater than or equal to 1" in e["model.lora.r"][0]
    assert "less than 1" in e["model.lora.dropout"][0]
    assert "should match pattern" in e["model.lora.target_modules"][0]
    assert "greater than or equal to 1" in e["record.every"][0]
    assert "whole number from 1 to 65536" in e["record.groups"][0]
    # LoRA without a pretrained model: filed with the LoRA inputs
    form = RunForm(post_for(**{"model.lora.r": "8"}))
    assert not form.is_valid()
    assert form.errors == {
        "model.lora": ["LoRA adapters need a pretrained model directory (model.path)"]
    }


def test_the_lora_inputs_show_for_a_pretrained_model_or_when_filled(owner_client):
    def lora_box(html: str) -> str:
        return html[
            html.index("data-lora") : html.index("</fieldset>", html.index("data-lora"))
        ]

    assert lora_box(owner_client.get("/runs/new/").content.decode()).startswith(
        "data-lora hidden"
    )
    shown = RunForm(post_for(**{"model.path": "/models/chat"}))
    assert shown.lora_shown
    assert RunForm(post_for(**{"model.lora.alpha": "4"})).lora_shown
    assert not RunForm(post_for()).lora_shown


def test_a_clone_shows_the_parents_lora_and_recording_and_launches_them_again(
    owner, owner_client, enqueued, commit, settings, tmp_path
):
    from tests.fixtures.seed import valid_config

    root = tmp_path / "models"
    (root / "chat").mkdir(parents=True)
    (root / "chat" / "config.json").write_text("{}")
    settings.MODEL_ROOTS = [root]
    cfg = valid_config("calc", "grpo", 4, name="parent")
    cfg["model"] = {
        **cfg["model"],
        "path": str(root / "chat"),
        "lora": {"r": 4, "alpha": 8.0, "dropout": 0.1, "target_modules": ["q_proj"]},
    }
    cfg["record"] = {"every": 3, "groups": None, "token_arrays": False}
    parent = seed_run(owner, name="parent", env="calc", steps=4, config=cfg)
    html = owner_client.get(f"/runs/{parent.pk}/clone/").content.decode()
    for name, shown in [
        ("model.lora.r", "4"),
        ("model.lora.alpha", "8.0"),
        ("model.lora.dropout", "0.1"),
        ("model.lora.target_modules", "q_proj"),
        ("record.every", "3"),
        ("record.groups", ""),  # all (placeholder "all")
    ]:
        field = html[html.index(f'name="{name}"') :]
        assert f'value="{shown}"' in field[: field.index(">")], name
    assert 'name="record.token_arrays" value="on" checked' not in html
    assert "data-lora hidden" not in html
    # the browser submits what it shows (a blank text input as "")
    values = values_from_config(f.normalise(parent.config))
    data = as_post(values, name="child")
    data["record.groups"] = ""
    with commit():
        r = owner_client.post(f"/runs/{parent.pk}/clone/", body(data))
    assert r.status_code == 302, r.content.decode()[:2000]
    child = Run.objects.get(name="child")
    assert child.config["model"]["lora"] == cfg["model"]["lora"]
    assert child.config["record"] == cfg["record"]
    # the run page says both at a glance
    page = owner_client.get(f"/runs/{child.pk}/").content.decode()
    assert (
        "<span data-lora-summary>LoRA r 4, alpha 8.0, dropout 0.1 on q_proj</span>"
        in page
    )
    recorded = page[page.index("data-recording>") :]
    assert "every 3rd step" in recorded[: recorded.index("</div>")]


@pytest.mark.parametrize("preset", ["nope", "%ED%A0%80"])
def test_an_unknown_preset_in_the_query_falls_back_to_grpo(owner_client, preset):
    # Found by tests/dashboard/test_endpoint_fuzz.py: the reward section was a 500.
    for url in ("/runs/new/reward-section/", "/runs/new/"):
        r = owner_client.get(f"{url}?env=calc&preset={preset}")
        assert r.status_code == 200
    assert default_config("calc", "\x00")["algorithm"]["preset"] == "grpo"


def test_a_preset_holding_nul_is_a_400_naming_it(owner_client):
    # No query parameter may hold NUL (dashboard.site.middleware.QueryTextMiddleware).
    for url in ("/runs/new/reward-section/", "/runs/new/"):
        r = owner_client.get(f"{url}?env=calc&preset=%00")
        assert r.status_code == 400
        assert "preset: must not contain NUL characters" in r.content.decode()


def test_the_rollout_engine_is_a_choice_of_the_registered_engines(owner_client):
    html = owner_client.get("/runs/new/").content.decode()
    select = html.split('name="rollout.engine"')[1].split("</select>")[0]
    options = [o.split('"')[1] for o in select.split("<option value=")[1:]]
    assert options[:4] == ["eager", "compiled", "continuous", "reference"]
    assert '"eager" selected' in select and "eager (default)" in select
    form = RunForm(post_for("swarm", **{"rollout.engine": "continuous"}))
    assert form.is_valid(), form.errors
    assert form.cleaned["rollout"]["engine"] == "continuous"
    form = RunForm(post_for("calc", **{"rollout.engine": "vllm"}))  # not registered
    assert not form.is_valid()
    assert "unknown rollout engine 'vllm'" in " ".join(form.errors["rollout.engine"])


@pytest.mark.parametrize("env", ["calc", "dataset", "search", "swarm"])
def test_no_two_inputs_of_the_form_share_a_label(owner_client, env):
    from collections import Counter

    from dashboard.pages import formfields as ff
    from dashboard.pages.catalog import env_params

    # An error summary that says "Path" or "Every" twice says nothing.
    shown = [*ff.STATIC_SPECS, *ff.REWARD_TOP, *env_params()[env]]
    labels = Counter(s.label for s in shown)
    assert [label for label, n in labels.items() if n > 1] == []
    html = owner_client.get(f"/runs/new/?env={env}").content.decode()
    for label in ("Checkpoint every (steps)", "Evaluate every (steps)", "Model path"):
        assert f">{label}</label>" in html
