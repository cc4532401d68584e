"""URL patterns of the HTML pages, included at the site root:

    path("", include("dashboard.pages.urls")),

Names live in the ``pages`` namespace (``{% url 'pages:run_detail' run.id %}``).
"""

from __future__ import annotations

from django.urls import path

from dashboard.pages import (
    account,
    compare,
    datasets,
    history,
    launch,
    tokens,
    trajectories,
    views,
)

app_name = "pages"

urlpatterns = [
    path("", views.home, name="home"),
    path("runs/", views.run_list, name="run_list"),
    path("runs/new/", launch.run_new, name="run_new"),
    path("runs/new/check/", launch.run_new_check, name="run_new_check"),
    path("runs/new/reward-section/", launch.reward_fragment, name="reward_fragment"),
    path("runs/<uuid:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<uuid:run_id>/cancel/", views.run_cancel, name="run_cancel"),
    path("runs/<uuid:run_id>/pause/", views.run_pause, name="run_pause"),
    path("runs/<uuid:run_id>/resume/", views.run_resume, name="run_resume"),
    path("runs/<uuid:run_id>/clone/", launch.run_clone, name="run_clone"),
    path(
        "runs/<uuid:run_id>/clone/check/",
        launch.run_clone_check,
        name="run_clone_check",
    ),
    path(
        "runs/<uuid:run_id>/trajectories/",
        trajectories.trajectories,
        name="trajectories",
    ),
    path(
        "runs/<uuid:run_id>/trajectories/<int:step>/<int:group>/<int:index>/",
        trajectories.trajectory,
        name="trajectory",
    ),
    path(
        "runs/<uuid:run_id>/critical-path/",
        trajectories.critical_path,
        name="critical_path",
    ),
    path(
        "runs/<uuid:run_id>/tasks/<path:task_id>/",
        history.task_history,
        name="task_history",
    ),
    path("compare/", compare.compare, name="compare"),
    path("compare/task/", history.compare_task, name="compare_task"),
    path("datasets/", datasets.dataset_list, name="datasets"),
    path("datasets/<int:dataset_id>/", datasets.dataset_detail, name="dataset_detail"),
    path(
        "datasets/<int:dataset_id>/delete/",
        datasets.dataset_delete,
        name="dataset_delete",
    ),
    path("settings/", account.account_settings, name="account"),
    path("settings/tokens/", tokens.token_list, name="tokens"),
    path(
        "settings/tokens/<int:token_id>/revoke/",
        tokens.token_revoke,
        name="token_revoke",
    ),
]
