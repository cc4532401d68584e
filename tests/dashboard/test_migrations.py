"""Migration 0004 recreates the rollup table with three levels and, on PostgreSQL,
rebuilds every level from the points already stored (and 0003's single level when
migrated backwards)."""

from __future__ import annotations

import math

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("dashboard", "0003_metric_rollup")]
AFTER = [("dashboard", "0004_metric_rollup_levels")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_rollup_levels_are_rebuilt_from_stored_points():
    if connection.vendor != "postgresql":
        pytest.skip("rollups exist on PostgreSQL only")
    from dashboard.models import ROLLUP_SHIFTS

    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes("dashboard")
    try:
        apps = _migrate(BEFORE)
        user = apps.get_model("auth", "User").objects.create(username="m")
        run = apps.get_model("dashboard", "Run").objects.create(
            owner=user, name="old", config={}, status="succeeded", queue="cpu"
        )
        values = {
            s: (math.nan if s % 41 == 0 else math.cos(s / 7)) for s in range(1, 700)
        }
        apps.get_model("dashboard", "MetricPoint").objects.bulk_create(
            apps.get_model("dashboard", "MetricPoint")(
                run=run, key="loss", step=s, value=v
            )
            for s, v in values.items()
        )
        apps = _migrate(AFTER)
        rows = apps.get_model("dashboard", "MetricRollup").objects.filter(run_id=run.pk)
        by_level: dict[int, dict[int, object]] = {}
        for r in rows:
            by_level.setdefault(r.shift, {})[r.bucket] = r
        assert sorted(by_level) == sorted(ROLLUP_SHIFTS)
        for shift, buckets in by_level.items():
            expected_buckets = {s >> shift for s in values}
            assert set(buckets) == expected_buckets
            for b, r in buckets.items():
                steps = [s for s in values if s >> shift == b]
                finite = [s for s in steps if not math.isnan(values[s])]
                nan = [s for s in steps if math.isnan(values[s])]
                lo = min(finite, key=lambda s: (values[s], s))
                hi = max(nan) if nan else max(finite, key=lambda s: (values[s], s))
                assert (r.vmin, r.smin) == (values[lo], lo)
                assert r.smax == hi
                assert math.isnan(r.vmax) if nan else r.vmax == values[hi]
                assert r.slast == max(steps)

        # Backwards: 0003's single 16-step level, rebuilt the same way.
        apps = _migrate(BEFORE)
        old = apps.get_model("dashboard", "MetricRollup").objects.filter(run_id=run.pk)
        assert {(r.bucket, r.smin, r.smax, r.slast) for r in old} == {
            (r.bucket, r.smin, r.smax, r.slast) for r in by_level[4].values()
        }
    finally:
        _migrate(leaf)


@pytest.mark.django_db
def test_sqlite_rollups_are_built_for_runs_stored_before(owner, tiny_config, enqueued):
    """Migration 0007 folds the stored points of every run into the rollup rows the
    ingest would have written (what the embedded default's charts now read)."""
    import importlib

    from django.apps import apps

    from dashboard.ingest import writer
    from dashboard.models import MetricPoint, MetricRollup
    from dashboard.runs import services

    if connection.vendor == "postgresql":
        pytest.skip("PostgreSQL has kept the rollups since 0003")
    run = services.launch_run(owner, tiny_config)
    values = {s: (math.nan if s % 41 == 0 else math.cos(s / 7)) for s in range(1, 700)}
    writer.insert_metrics(run.id, {(s, "kl"): v for s, v in values.items()})
    fields = ("key", "shift", "bucket", "smin", "smax", "slast")
    expected = sorted(MetricRollup.objects.filter(run=run).values_list(*fields))
    MetricRollup.objects.all().delete()
    migration = importlib.import_module("dashboard.migrations.0007_sqlite_rollups")
    migration.build(apps, connection.schema_editor())
    assert sorted(MetricRollup.objects.filter(run=run).values_list(*fields)) == expected
    assert MetricPoint.objects.filter(run=run).count() == 699 and len(expected) > 50


@pytest.mark.django_db
def test_sqlite_nan_stored_as_null_before_0014_reads_back_as_nan(owner):
    """Before 0014, SQLite kept a metric's NaN as NULL (the only meaning NULL had in
    the metric tables); 0014 rewrites those rows to what the field now stores, and
    back when migrated backwards."""
    import importlib

    from django.apps import apps

    from dashboard.models import MetricPoint, MetricRollup, Run

    if connection.vendor != "sqlite":
        pytest.skip("PostgreSQL always stored NaN itself")
    run = Run.objects.create(owner=owner, name="old", config={}, external=True)
    MetricPoint.objects.create(run=run, key="kl", step=1, value=0.5)
    MetricRollup.objects.create(
        run=run, key="kl", shift=4, bucket=0, vmin=0.5, smin=1, vmax=0.5, smax=1,
        vlast=0.5, slast=1,
    )  # fmt: skip
    with connection.cursor() as cur:  # what the old code left behind
        cur.execute(
            "INSERT INTO dashboard_metricpoint (run_id, key, step, value) "
            "VALUES (%s, 'kl', 2, NULL)",
            [run.pk.hex],
        )
        cur.execute("UPDATE dashboard_metricrollup SET vmax = NULL, vlast = NULL")
    migration = importlib.import_module("dashboard.migrations.0014_exact_floats")
    migration.nan_as_text(apps, connection.schema_editor())
    points = dict(MetricPoint.objects.filter(run=run).values_list("step", "value"))
    assert points[1] == 0.5 and math.isnan(points[2])
    row = MetricRollup.objects.get(run=run)
    assert row.vmin == 0.5 and math.isnan(row.vmax) and math.isnan(row.vlast)
    migration.nan_as_null(apps, connection.schema_editor())
    assert MetricPoint.objects.get(run=run, step=2).value is None
