"""Rollups at three levels (16, 64 and 256 steps) instead of one.

The table is recreated with ``shift`` in its primary key and, on PostgreSQL, rebuilt
from the stored points in one statement per level.
"""

import django.db.models.deletion
from django.db import migrations, models

SHIFTS = (4, 6, 8)  # frozen copy of dashboard.models.ROLLUP_SHIFTS at this migration


def rebuild(apps, schema_editor):
    if schema_editor.connection.vendor != "postgresql":
        return
    point = apps.get_model("dashboard", "MetricPoint")._meta.db_table
    rollup = apps.get_model("dashboard", "MetricRollup")._meta.db_table
    for sh in SHIFTS:
        schema_editor.execute(
            f"INSERT INTO {rollup} "
            "(run_id, key, shift, bucket, vmin, smin, vmax, smax, vlast, slast) "
            f"SELECT run_id, key, {sh}, step >> {sh}, "
            "(min(ARRAY[value, step]))[1], (min(ARRAY[value, step]))[2]::int, "
            "(max(ARRAY[value, step]))[1], (max(ARRAY[value, step]))[2]::int, "
            "(max(ARRAY[step, value]))[2], max(step) "
            f"FROM {point} GROUP BY run_id, key, step >> {sh}"
        )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0003_metric_rollup"),
    ]

    operations = [
        migrations.DeleteModel(name="MetricRollup"),
        migrations.CreateModel(
            name="MetricRollup",
            fields=[
                (
                    "pk",
                    models.CompositePrimaryKey(
                        "run_id",
                        "key",
                        "shift",
                        "bucket",
                        blank=True,
                        editable=False,
                        primary_key=True,
                        serialize=False,
                    ),
                ),
                ("key", models.CharField(max_length=200)),
                ("shift", models.SmallIntegerField()),
                ("bucket", models.IntegerField()),
                ("vmin", models.FloatField(null=True)),
                ("smin", models.IntegerField()),
                ("vmax", models.FloatField(null=True)),
                ("smax", models.IntegerField()),
                ("vlast", models.FloatField(null=True)),
                ("slast", models.IntegerField()),
                (
                    "run",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        to="dashboard.run",
                    ),
                ),
            ],
        ),
        migrations.RunPython(rebuild, migrations.RunPython.noop),
    ]
