"""File names from a user's text keep accented letters as their letter (a
newcomer's dataset "Arith intl — café" was stored as Arith-intl-caf.jsonl, and a
run "mychat — données intl" downloaded as mychat-donn-es-intl-model-step-8.tar)."""

from __future__ import annotations

import pytest

from dashboard.errors import ServiceError
from dashboard.library.datasets import check_name
from dashboard.library.filenames import ascii_name
from dashboard.runs.kept_model import archive_name


def test_accented_letters_keep_their_letter_and_the_rest_becomes_a_dash():
    assert ascii_name("Arith intl — café", 120) == "Arith-intl-cafe"
    assert ascii_name("mychat — données intl", 60) == "mychat-donnees-intl"
    assert ascii_name("Straße ﬁle ½", 60) == "Stra-e-file-1-2"
    assert ascii_name("../../etc/passwd", 60) == "etc-passwd"
    assert ascii_name("算数", 60) == ""
    assert ascii_name("a" * 70 + "-", 60) == "a" * 60
    assert ascii_name("x" * 59 + ".y", 60) == "x" * 59  # no trailing dot


def test_a_datasets_name_and_a_kept_models_archive_use_it():
    assert check_name("up.jsonl", "Arith intl — café") == (
        "Arith intl — café.jsonl",
        "Arith-intl-cafe.jsonl",
        "jsonl",
    )

    class Run:
        name = "mychat — données intl"

    class Kept:
        step = 8

    assert archive_name(Run, Kept, "model") == "mychat-donnees-intl-model-step-8"
    with pytest.raises(ServiceError, match="letters or digits"):
        check_name("up.jsonl", "-- ..")
