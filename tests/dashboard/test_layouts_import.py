"""prime-rl and miles runs imported into the real dashboard (the live server, the
HTTP ingest, the one write path): their per-token arrays without a column of ours
stored with the tokens and read back by name (API and trajectory page), a branched
prime-rl trace shown branch by branch."""

from __future__ import annotations

import re

import pytest

from dashboard.models import Run, Trajectory
from dashboard.site import tokens
from tests.fixtures import layouts
from trainer.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def imported(owner, live_server, settings, monkeypatch, tmp_path):
    settings.ALLOWED_HOSTS = ["*"]
    monkeypatch.setenv("DASHBOARD_TOKEN", tokens.do_create_token(owner, "i")[1])

    def run(source, path, name):
        args = ["import", "--from", source, str(path), "--name", name]
        args += ["--report-to", live_server.url, "--spool", str(tmp_path / name)]
        assert main(args) == 0
        return Run.objects.get(name=name)

    return run


def colour_options(html: str) -> list[str]:
    select = re.search(r"<select data-colour-by.*?</select>", html, re.S).group(0)
    return re.findall(r'<option value="([^"]+)"', select)


def test_prime_rls_series_and_branches_are_stored_and_shown(
    imported, owner_client, tmp_path
):
    layouts.prime_run(tmp_path / "p", step=1)
    layouts.prime_branched_run(tmp_path / "p", step=2)
    run = imported("prime-rl", tmp_path / "p", "prime")
    api = f"/api/runs/{run.pk}/trajectories"
    action = owner_client.get(f"{api}/1/0/0").json()["segments"][1]
    assert action["series"]["mismatch_kl"] == [0.03, 0.02]
    assert action["series"]["is_masked"] == [0, 1]
    assert action["masked"] == [[1, "trust_region"]]
    page = owner_client.get(f"/runs/{run.pk}/trajectories/1/0/0/").content.decode()
    assert "series:mismatch_kl" in colour_options(page)
    assert "series:log_importance_ratio" in colour_options(page)

    branched = owner_client.get(f"{api}/2/0/0").json()
    assert [s.get("branch") for s in branched["segments"]] == [0, 0, 0, 0, 1]
    assert branched["segments"][4]["logprob"] == [-1.5, -2.5]
    assert branched["facts"]["branches"][1]["forks_from"] == 0
    page = owner_client.get(f"/runs/{run.pk}/trajectories/2/0/0/").content.decode()
    assert page.count("data-seg-branch") == 5
    forks = re.findall(r"<p[^>]*data-branch-fork>(.*?)</p>", page)
    assert forks == [
        "branch 1 starts here: it shares the first 3 messages of branch 0, "
        "then goes its own way"
    ]
    assert Trajectory.objects.filter(run=run).count() == 4  # 3 + 1 episodes


def test_miles_reference_arrays_and_returns_are_stored_and_shown(
    imported, owner_client, tmp_path
):
    prompt = [1, 2, 3]
    samples = [layouts.miles_sample(0, 0, prompt, [4, 5], reward=1.0)]
    layouts.miles_rollout(tmp_path, 2, samples)
    row = {"index": 0, "tokens": prompt + [4, 5], "reward": 1.0}
    row |= {"log_probs": [-0.25, -0.75], "rollout_log_probs": [-0.5, -0.5]}
    row |= {"entropy": [1.0, 2.0], "advantages": [0.5, 0.5]}
    row |= {"ref_log_probs": [-0.375, -0.625], "returns": [1.0, 1.0]}
    layouts.miles_train(tmp_path, 2, 0, [row])
    run = imported("miles", tmp_path, "miles")
    detail = owner_client.get(f"/api/runs/{run.pk}/trajectories/2/0/0").json()
    action = detail["segments"][1]
    assert action["series"] == {
        "ref_log_probs": [-0.375, -0.625],
        "returns": [1.0, 1.0],
    }
    page = owner_client.get(f"/runs/{run.pk}/trajectories/2/0/0/").content.decode()
    assert colour_options(page)[-2:] == ["series:ref_log_probs", "series:returns"]
