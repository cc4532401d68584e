"""PostgreSQL: make the metric primary key cover ``value`` (index-only chart scans).

Django cannot declare INCLUDE on a primary key, so the constraint is rebuilt here;
other databases keep the plain composite key.
"""

from django.db import migrations

TABLE = "dashboard_metricpoint"


def covering(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey, "
            f"ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (run_id, key, step) INCLUDE (value)"
        )


def plain(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(
            f"ALTER TABLE {TABLE} DROP CONSTRAINT {TABLE}_pkey, "
            f"ADD CONSTRAINT {TABLE}_pkey PRIMARY KEY (run_id, key, step)"
        )


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0001_initial")]
    operations = [migrations.RunPython(covering, plain)]
