"""New run and "clone and edit": the form page, its live check, and its fragments.

POST validates with :class:`dashboard.pages.forms.RunForm` (errors inline, per field),
then calls ``services.launch_run`` (a clone passes ``parent=``) and redirects to the
run page. ``.../check/`` answers the same validation as JSON (errors per input and, for
a clone, the diff to the parent) so the page can show both while the user types.

The what-if panel's "clone with these weights" opens the clone form filled with them
(``?weights={json}``; from an alert's repair also ``&repair=<detector>&step=<n>``,
carried to the launch in hidden ``repair.*`` inputs so the clone records what it
repairs): the user reviews the config, then launches it here like any clone. An
alert that no weight repairs but an added component does (length drift: DAPO's
overlong penalty) opens it with ``?repair=<detector>&step=<n>`` alone: the component
added, a notice saying why.
"""

from __future__ import annotations

import json
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from dashboard import jsonsafe
from dashboard.errors import InvalidConfig
from dashboard.library import datasets, model_dirs, roots
from dashboard.models import Run
from dashboard.pages import catalog, configdiff, form_advice
from dashboard.pages import formfields as ff
from dashboard.pages import forms as f
from dashboard.pages.csp import csp
from dashboard.reads import repair as repair_reads
from dashboard.runs import repair, services
from trainer.config import TrainConfig


def _context(
    form: f.RunForm,
    parent: Run | None,
    diff: list[Any],
    repairing: dict[str, str] | None = None,
    *,
    whatif: bool = False,
    added: dict[str, Any] | None = None,
    user: Any = None,
) -> dict[str, Any]:
    # the dataset environment's file offered as the user's uploads, by name
    choices = _dataset_choices(form, user)
    return {
        "dataset_choices": choices,
        "dataset_chosen": next((d for d in choices if d["chosen"]), None),
        "form": form,
        "parent": parent,
        "diff": diff,
        "repairing": repairing or {},  # detector, alert_step: see _reweighted
        "whatif": whatif,  # filled with the what-if's weights
        "added": added,  # a component the repair adds: see _added
        "f": ff,
        "env_names": catalog.env_names(),
        "env_labels": catalog.env_labels(),
        "env_params": catalog.env_params(),
        "models": model_dirs.list_models(),
        "preset_choices": catalog.preset_choices(),
        "presets": catalog.presets_data(),
        "component_names": list(catalog.component_classes()),
        "component_envs": catalog.component_envs(),
        "component_params": {
            name: catalog.component_param_specs(name, "reward.components.__i__.params")
            for name in catalog.component_classes()
        },
        "component_proto": ff.ComponentRow(
            index="__i__",  # type: ignore[arg-type]  (the browser fills it in)
            prefix="reward.components.__i__",
            kind="outcome",
            specs=ff.row_specs(ff.component_row(), "reward.components.__i__"),
            schedule=ff.row_specs(ff.SCHEDULE_ROW, "reward.components.__i__.schedule"),
            params=[],
        ),
        "judge_proto": ff.JudgeRow(
            index="__i__",  # type: ignore[arg-type]
            prefix="reward.judges.__i__",
            specs=ff.row_specs(ff.judge_row(), "reward.judges.__i__"),
            dimensions=[],
        ),
        "dimension_proto": ff.Row(
            "__k__",  # type: ignore[arg-type]
            "reward.judges.__i__.rubric.__k__",
            ff.row_specs(ff.DIMENSION_ROW, "reward.judges.__i__.rubric.__k__"),
        ),
        "check_url": (
            f"/runs/{parent.pk}/clone/check/" if parent else "/runs/new/check/"
        ),
    }


def _dataset_choices(form: f.RunForm, user: Any) -> list[dict[str, Any]]:
    if user is None or not user.is_authenticated:
        return []
    value = form.values.get(DATASET_PATH, "")
    if isinstance(value, list):
        value = value[0] if value else ""
    return datasets.choices_of(user, value)


DATASET_PATH = "envp.dataset.path"


def _diff(
    parent: Run | None, config: dict[str, Any] | None
) -> list[configdiff.DiffRow]:
    if parent is None or config is None:
        return []
    # Paths as the form shows them on both sides: the parent's stored real path
    # and the same path picked relative to its root are no change.
    sides = [f.normalise(parent.config), config]
    # Whole values: a long one starts and opens in full (partials/config_value.html,
    # run_form.js's valueCell), as on the compare page.
    return configdiff.diff([roots.shown_paths(c) for c in sides], limit=None)


def _step(text: str | None) -> Any:
    """An alert's step from a query string or a hidden input (other text is passed
    on as it is, for ``repair.check_alert`` to refuse)."""
    if text is None or text == "":
        return None
    return int(text) if text.isdigit() and len(text) < 12 else text


def _submit(request: HttpRequest, parent: Run | None) -> HttpResponse:
    form = f.RunForm(request.POST)
    repairing = {  # the hidden inputs of a repair's form (_reweighted)
        k: request.POST[f"repair.{k}"]
        for k in ("detector", "alert_step")
        if parent is not None and request.POST.get(f"repair.{k}")
    }
    if form.is_valid():
        assert form.cleaned is not None
        try:
            # A name left blank: the run is named from what it is (services.auto_name).
            named = "name" in form.raw
            config = {k: v for k, v in form.cleaned.items() if named or k != "name"}
            fixes = None
            if parent is not None and repairing:  # opened from an alert's what-if
                fixes = repair.clone_repair(
                    request.user,
                    parent,
                    form.cleaned,
                    repairing.get("detector"),
                    _step(repairing.get("alert_step")),
                )
            run = services.launch_run(
                request.user,
                config,
                name=form.cleaned.get("name") if named else None,
                parent=parent,
                repair=fixes,
            )
        except services.ServiceError as exc:
            form.add_service_errors(exc.errors)
        else:
            return redirect("pages:run_detail", run.pk)
    status = (
        409
        if any("already queued or running" in e for e in form.non_field_errors)
        else 400
    )
    return render(
        request,
        "pages/new.html",
        _context(
            form, parent, _diff(parent, form.cleaned), repairing, user=request.user
        ),
        status=status,
    )


@csp
def run_new(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        return _submit(request, None)
    env = request.GET.get("env", "calc")
    preset = request.GET.get("preset", "grpo")
    if preset not in catalog.PRESETS:
        preset = "grpo"
    params = None
    if request.GET.get("dataset"):  # "use in a new run" from /datasets/
        row = datasets.get_dataset_for_user(request.user, request.GET["dataset"])
        env, params = (
            "dataset",
            {
                "path": roots.shown(row.path, model=False),
                "prompt_key": row.prompt_key,
                "answer_key": row.answer_key,
            },
        )
    form = f.RunForm(initial=f.default_config(env, preset, params))
    ctx = _context(form, None, [], user=request.user)
    return render(request, "pages/new.html", ctx)


@csp
def run_clone(request: HttpRequest, run_id: Any) -> HttpResponse:
    parent = services.get_run_for_user(request.user, run_id)
    if parent.external:
        errors = [services.NOT_CLONEABLE]
        return render(request, "400.html", {"errors": errors}, status=400)
    if request.method == "POST":
        return _submit(request, parent)
    # From the what-if (weights), or an alert whose repair adds a component (no
    # weights): review, then launch.
    if "weights" in request.GET or request.GET.get("repair"):
        try:
            if "weights" in request.GET:
                return _reweighted(request, parent)
            return _added(request, parent)
        except services.ServiceError as exc:
            # An error may quote the weights' text: a lone surrogate is no UTF-8.
            ctx = {"errors": [jsonsafe.text(e) for e in exc.errors]}
            return render(request, "400.html", ctx, status=exc.status)
    initial = roots.shown_paths(f.normalise(parent.config))
    initial["name"] = f"{parent.name} (clone)"[:200]
    if request.GET.get("start") == "checkpoint":  # "start a run from this one"
        initial["model"] = {**initial.get("model", {}), "init_from_run": str(parent.pk)}
        initial["name"] = f"{parent.name} (continued)"[:200]
    form = f.RunForm(initial=initial)
    ctx = _context(form, parent, [], user=request.user)
    return render(request, "pages/new.html", ctx)


def _reweighted(request: HttpRequest, parent: Run) -> HttpResponse:
    """The clone form filled with the what-if's weights (``?weights={json}``), and
    for an alert's repair (``&repair=<detector>&step=<n>``) named for it, with the
    hidden inputs that make its launch record the repair; the changes from the
    parent listed at once."""
    try:
        weights = json.loads(request.GET["weights"])
    except (ValueError, RecursionError):
        raise services.ServiceError(
            "weights: must be a JSON object of {component: base weight}"
        ) from None
    services.check_shape(weights, "weights")
    config, _ = repair.reweighted_config(parent, weights)
    what: dict[str, Any] = {}
    if request.GET.get("repair"):
        repair.check_owner(request.user, parent)
        step = _step(request.GET.get("step"))
        what = repair.check_alert(parent, request.GET["repair"], step)
    shown = f.normalise(config)
    shown["name"] = repair.repair_name(parent, what)
    form = f.RunForm(initial=roots.shown_paths(shown))
    repairing = {k: str(v) for k, v in what.items()}  # detector, alert_step
    ctx = _context(
        form, parent, _diff(parent, shown), repairing, whatif=True, user=request.user
    )
    return render(request, "pages/new.html", ctx)


def _added(request: HttpRequest, parent: Run) -> HttpResponse:
    """The clone form for an alert no reward weight repairs but an added component
    does (``?repair=<detector>&step=<n>``, no weights: DAPO's overlong penalty against
    length drift, sized to the parent's generation budget; see
    :func:`dashboard.reads.repair.addition_for`): the component added to the
    parent's reward, a notice saying why, and the hidden inputs that make its launch
    record the repair, as the what-if's clone does."""
    repair.check_owner(request.user, parent)
    step = _step(request.GET.get("step"))
    what = repair.check_alert(parent, request.GET["repair"], step)
    added = repair_reads.addition_for(parent, what["detector"])
    if added is None:
        raise InvalidConfig(
            f"repair: no component added to this run's reward removes "
            f"{what['detector']}; its alert says what does"
        )
    _, reward = repair.reward_of(parent)
    data = reward.model_dump(mode="json")
    data["components"].append({k: added[k] for k in ("name", "weight", "params")})
    shown = f.normalise(services.merge_overrides(parent.config, {"reward": data}))
    shown["name"] = repair.repair_name(parent, what)
    form = f.RunForm(initial=roots.shown_paths(shown))
    repairing = {k: str(v) for k, v in what.items()}  # detector, alert_step
    ctx = _context(
        form, parent, _diff(parent, shown), repairing, added=added, user=request.user
    )
    return render(request, "pages/new.html", ctx)


def _check(request: HttpRequest, parent: Run | None) -> JsonResponse:
    form = f.RunForm(request.POST)
    ok, estimate, warnings = form.is_valid(), None, {}
    if ok:  # what only the platform knows: paths in the roots, init_from_run
        try:
            checked = services.check_platform(
                TrainConfig.model_validate(form.cleaned), request.user
            )
            estimate = services.step_estimate(checked)
            warnings = form_advice.warnings(checked)
        except services.ServiceError as exc:
            form.add_service_errors(exc.errors)
            ok = False
    diff = _diff(parent, form.cleaned)
    return JsonResponse(
        {
            "ok": ok,
            "errors": form.errors,
            "estimate": estimate,
            "warnings": warnings,
            "diff": [
                {"path": d.path, "parent": d.values[0], "value": d.values[1]}
                for d in diff
            ],
        }
    )


@require_POST
def run_new_check(request: HttpRequest) -> JsonResponse:
    return _check(request, None)


@require_POST
def run_clone_check(request: HttpRequest, run_id: Any) -> JsonResponse:
    parent = services.get_run_for_user(request.user, run_id)
    if parent.external:
        errors = {"": [services.NOT_CLONEABLE]}
        return JsonResponse({"ok": False, "errors": errors}, status=400)
    return _check(request, parent)


@require_GET
@csp
def reward_fragment(request: HttpRequest) -> HttpResponse:
    """The reward section filled with an environment's defaults (the form swaps it in
    when the environment changes), plus that environment's parameters."""
    env = request.GET.get("env", "calc")
    form = f.RunForm(initial=f.default_config(env, request.GET.get("preset", "grpo")))
    ctx = _context(form, None, [])
    return render(request, "pages/partials/reward_section.html", ctx)
