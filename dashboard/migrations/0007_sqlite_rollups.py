"""SQLite (the embedded default) now keeps the metric rollups too: build them for the
runs stored before, from their points. PostgreSQL has kept them since 0003/0004.

Frozen here (a migration never imports the app's code): the fold is the one in
``dashboard.rollups`` as of this migration.
"""

import math

from django.db import migrations

SHIFTS = (4, 6, 8)


def _order(value, step):
    if value is None or math.isnan(value):
        return (1, 0.0, step)
    return (0, value, step)


def _fold(acc, value, step):
    if acc is None:
        return [value, step, value, step, value, step]
    if _order(value, step) < _order(acc[0], acc[1]):
        acc[0], acc[1] = value, step
    if _order(value, step) > _order(acc[2], acc[3]):
        acc[2], acc[3] = value, step
    if step >= acc[5]:
        acc[4], acc[5] = value, step
    return acc


def build(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        return
    Point = apps.get_model("dashboard", "MetricPoint")
    Rollup = apps.get_model("dashboard", "MetricRollup")
    for run_id in Point.objects.values_list("run_id", flat=True).distinct():
        rows = {}
        points = Point.objects.filter(run_id=run_id).values_list("key", "step", "value")
        for key, step, value in points.iterator(chunk_size=5000):
            for sh in SHIFTS:
                k = (key, sh, step >> sh)
                rows[k] = _fold(rows.get(k), value, step)
        Rollup.objects.filter(run_id=run_id).delete()
        Rollup.objects.bulk_create(
            [
                Rollup(
                    run_id=run_id, key=key, shift=sh, bucket=bucket,
                    vmin=r[0], smin=r[1], vmax=r[2], smax=r[3], vlast=r[4], slast=r[5],
                )
                for (key, sh, bucket), r in rows.items()
            ],
            batch_size=500,
        )  # fmt: skip


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        apps.get_model("dashboard", "MetricRollup").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0006_datasets")]
    operations = [migrations.RunPython(build, drop)]
