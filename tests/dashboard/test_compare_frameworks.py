"""Compare a run of ours with a TRL run (issue 22.10e): the well-known settings are
lined up by meaning (learning rate, group size, beta, clip range...) through the
table of ``trainer.config_keys``, and the ~200 keys only one of them has are folded
into an "N other keys" section instead of filling the page."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.seed import valid_config

pytestmark = pytest.mark.django_db


def _trl_config() -> dict:
    trl = pytest.importorskip("trl")
    args = trl.GRPOConfig(
        output_dir="/tmp/unused-grpo",
        learning_rate=1e-6,
        num_generations=8,
        beta=0.04,
        epsilon=0.2,
        temperature=0.9,
        seed=7,
        report_to="none",
        use_cpu=True,
        bf16=False,
    )
    return json.loads(args.to_json_string())


def test_a_native_and_a_trl_run_line_up_their_settings(owner, owner_client):
    from dashboard.models import Run
    from dashboard.runs import external

    cfg = valid_config("calc", "grpo", 10)
    native = Run.objects.create(
        name="ours", owner=owner, config=cfg, status="succeeded"
    )
    trl_config = _trl_config()
    assert len(trl_config) > 100
    trl = external.do_create_external_run(
        owner, name="trl", framework="trl", config=trl_config
    )
    r = owner_client.get(f"/compare/?runs={native.pk},{trl.pk}")
    assert r.status_code == 200
    matched, rows, other = (r.context[k] for k in ("matched", "diff", "other_keys"))
    by_label = {m.label: m for m in matched}
    lr = by_label["learning rate"]
    assert lr.paths == ("optim.lr", "learning_rate") and lr.differ
    assert lr.values == (str(cfg["optim"]["lr"]), "1e-06")
    group = by_label["group size (samples per prompt)"]
    assert group.paths == ("rollout.group_size", "num_generations")
    # Our clip_low of None is the preset's (grpo: 0.2), TRL's epsilon is 0.2.
    clip = by_label["clip range low (epsilon)"]
    assert clip.values == ("0.2", "0.2") and not clip.differ
    # TRL's epsilon_high None is epsilon; ours is the preset's (grpo: 0.2).
    high = by_label["clip range high (epsilon_high)"]
    assert high.paths == ("algorithm.clip_high", "epsilon") and not high.differ
    assert by_label["KL coefficient (beta)"].paths == ("algorithm.kl_beta", "beta")
    # Rollouts a forward and backward: our micro-batches, TRL's per-device batch.
    batch = by_label["per-device batch (completions)"]
    assert batch.paths == ("optim.micro_batch_size", "per_device_train_batch_size")
    # Our 0 means something: the page says what (it read a bare "0").
    assert batch.values[0] == "0 (the whole minibatch at once)"
    budget = by_label["per-device token budget (dynamic batch size)"]
    assert budget.values[0] == "0 (no limit)"
    assert by_label["seed"].values == ("0", "7") and by_label["seed"].differ
    assert not by_label["prompts per step"].differ  # TRL has no such setting
    # Nothing unmatched in the main table; the rest folded, counted.
    assert all("—" not in row.values for row in rows)
    # Our optim section and TRL's optim (the optimiser's name) do not pair up.
    assert "optim" not in {row.path for row in rows}
    assert len(other) > 100
    assert not {row.path for row in other} & {"learning_rate", "optim.lr"}
    html = r.content.decode()
    assert "data-config-matched" in html
    assert f"{len(other)} other keys (only in some runs" in html
    assert "<details data-config-other>" in html
