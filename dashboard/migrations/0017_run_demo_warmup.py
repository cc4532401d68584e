from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [("dashboard", "0016_workers")]

    operations = [
        migrations.AddField(
            model_name="run",
            name="demo",
            field=models.BooleanField(default=False),
        ),
        migrations.AddField(
            model_name="run",
            name="warmup",
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
