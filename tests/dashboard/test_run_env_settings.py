from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured

from dashboard.site.env import env_bool, env_int, env_list, env_str, parse_database_url


def test_env_bool_accepts_the_usual_spellings():
    assert env_bool("X", False, environ={"X": "yes"}) is True
    assert env_bool("X", True, environ={"X": "0"}) is False
    assert env_bool("X", True, environ={}) is True


def test_env_bool_rejects_anything_else():
    with pytest.raises(ImproperlyConfigured, match="X='maybe'"):
        env_bool("X", False, environ={"X": "maybe"})


def test_env_int_rejects_non_integers_and_out_of_range_values():
    assert env_int("N", 5, environ={"N": " 7 "}) == 7
    with pytest.raises(ImproperlyConfigured, match="not an integer"):
        env_int("N", 5, environ={"N": "7.5"})
    with pytest.raises(ImproperlyConfigured, match="below the minimum"):
        env_int("N", 5, min_value=1, environ={"N": "0"})


def test_env_str_and_list_treat_empty_as_unset():
    assert env_str("S", "d", environ={"S": ""}) == "d"
    assert env_list("L", ["a"], environ={"L": "x, ,y"}) == ["x", "y"]


def test_database_url_parses_postgres_with_options():
    db = parse_database_url("postgres://u:p%40ss@db.example:6543/runs?sslmode=require")
    assert db["ENGINE"] == "django.db.backends.postgresql"
    assert (db["USER"], db["PASSWORD"], db["HOST"], db["PORT"], db["NAME"]) == (
        "u",
        "p@ss",
        "db.example",
        "6543",
        "runs",
    )
    assert db["OPTIONS"] == {"sslmode": "require"}


def test_database_url_parses_sqlite_and_rejects_unknown_schemes():
    assert parse_database_url("sqlite:////tmp/x.db")["NAME"] == "/tmp/x.db"
    with pytest.raises(ImproperlyConfigured, match="mysql"):
        parse_database_url("mysql://u@h/db")
    with pytest.raises(ImproperlyConfigured, match="names no database"):
        parse_database_url("postgres://u@h:5432/")


def test_production_settings_require_a_secret_key():
    import os
    import subprocess
    import sys

    env = {
        k: v for k, v in os.environ.items() if k not in {"SECRET_KEY", "PYTEST_VERSION"}
    }
    env.update(
        DATABASE_URL="postgres://u@127.0.0.1:1/x", REDIS_URL="redis://127.0.0.1:1/0"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='dashboard.settings'; django.setup()",
        ],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0
    assert "SECRET_KEY is required" in out.stderr


def test_production_settings_pass_the_deploy_check():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "PYTEST_VERSION"}
    env.update(
        DATABASE_URL="postgres://u@127.0.0.1:1/x",
        REDIS_URL="redis://127.0.0.1:1/0",
        SECRET_KEY="k" * 20 + "-Zq8#pL2@vN5!xR7$tW9^yB3&uE6*iO1(aS4)dF0",
        ALLOWED_HOSTS="rl.example.com",
    )
    out = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_the_readme_names_every_variable_production_needs_over_plain_http():
    """The README's plain-HTTP line, applied to the production settings, leaves no
    HTTPS-only setting on (a browser over http would lose its login otherwise)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    production = readme.split("## Production", 1)[1].split("\n## ", 1)[0]
    line = next(x for x in production.splitlines() if "SESSION_COOKIE_SECURE=" in x)
    plain = dict(re.findall(r"([A-Z_]+)=(\S+)", line))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_VERSION"}
    env.update(
        DATABASE_URL="postgres://u@127.0.0.1:1/x",
        REDIS_URL="redis://127.0.0.1:1/0",
        SECRET_KEY="k" * 50,
        **plain,
    )
    names = [
        "SESSION_COOKIE_SECURE",
        "CSRF_COOKIE_SECURE",
        "SECURE_SSL_REDIRECT",
        "SECURE_HSTS_SECONDS",
    ]
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='dashboard.settings';"
        "django.setup(); from django.conf import settings as s;"
        f"print([getattr(s, n) for n in {names!r}])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[False, False, False, 0]", plain
