"""Float columns that keep NaN on SQLite (``dashboard.models.ExactFloatField``).

The column type does not change (state only). On SQLite, the rows stored before kept
NaN as NULL in the metric tables, where NULL meant nothing else: those become the text
``'NaN'`` the field now writes (and back again when migrated backwards). A NULL
reward, advantage or score may have been NaN or "none given": it stays NULL.
PostgreSQL always stored NaN natively; nothing to rewrite there.
"""

from django.db import migrations

import dashboard.models

METRIC_COLUMNS = {
    "dashboard_metricpoint": ("value",),
    "dashboard_metricrollup": ("vmin", "vmax", "vlast"),
}


def _rewrite(schema_editor, old, new):
    if schema_editor.connection.vendor != "sqlite":
        return
    with schema_editor.connection.cursor() as cur:
        for table, columns in METRIC_COLUMNS.items():
            for col in columns:
                cur.execute(f"UPDATE {table} SET {col} = {new} WHERE {col} IS {old}")


def nan_as_text(apps, schema_editor):
    _rewrite(schema_editor, "NULL", "'NaN'")


def nan_as_null(apps, schema_editor):
    _rewrite(schema_editor, "'NaN'", "NULL")


def _exact(model_name, name):
    return migrations.AlterField(
        model_name=model_name,
        name=name,
        field=dashboard.models.ExactFloatField(null=True),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("dashboard", "0013_dataset_preview"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                _exact("judgement", "score"),
                _exact("metricpoint", "value"),
                _exact("metricrollup", "vlast"),
                _exact("metricrollup", "vmax"),
                _exact("metricrollup", "vmin"),
                _exact("trajectory", "advantage"),
                _exact("trajectory", "reward"),
            ],
            database_operations=[migrations.RunPython(nan_as_text, nan_as_null)],
        ),
    ]
