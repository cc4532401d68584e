"""Rollups at three levels (16, 64 and 256 steps) instead of one.

The table is recreated with ``shift`` in its primary key and, on PostgreSQL, rebuilt
from the stored points in one statement per level; backwards, 0003's single level is
rebuilt the same way.
"""

import django.db.models.deletion
from django.db import migrations, models

SHIFTS = (4, 6, 8)  # frozen copy of dashboard.models.ROLLUP_SHIFTS at this migration


AGGREGATES = (
    "(min(ARRAY[value, step]))[1], (min(ARRAY[value, step]))[2]::int, "
    "(max(ARRAY[value, step]))[1], (max(ARRAY[value, step]))[2]::int, "
    "(max(ARRAY[step, value]))[2], max(step)"
)


def _rebuild(apps, schema_editor, shifts, with_shift):
    if schema_editor.connection.vendor != "postgresql":
        return
    point = apps.get_model("dashboard", "MetricPoint")._meta.db_table
    rollup = apps.get_model("dashboard", "MetricRollup")._meta.db_table
    for sh in shifts:
        schema_editor.execute(
            f"INSERT INTO {rollup} (run_id, key, "
            + ("shift, " if with_shift else "")
            + "bucket, vmin, smin, vmax, smax, vlast, slast) "
            + "SELECT run_id, key, "
            + (f"{sh}, " if with_shift else "")
            + f"step >> {sh}, {AGGREGATES} FROM {point} GROUP BY run_id, key, step >> {sh}"
        )


def rebuild(apps, schema_editor):
    """Forwards: every level from the points."""
    _rebuild(apps, schema_editor, SHIFTS, with_shift=True)


def rebuild_single_level(apps, schema_editor):
    """Backwards: 0003's one 16-step level from the points."""
    _rebuild(apps, schema_editor, (4,), with_shift=False)


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0003_metric_rollup"),
    ]

    # Run and stop the workers around this migration: code from before it cannot
    # write to the new table, nor code from after it to the old one.
    operations = [
        # Backwards, this runs last, on 0003's table re-created empty.
        migrations.RunPython(migrations.RunPython.noop, rebuild_single_level),
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
