from __future__ import annotations

import pytest

from rewards.types import RewardBreakdown, RewardResult


def outcome_and_format(episodes, step):
    """A self-contained reward function (success on the last step, a small bonus for
    each well-formed call), so loop tests do not depend on ``rewards`` components."""
    out = []
    for ep in episodes:
        n = max(1, len(ep.steps))
        win = 1.0 if ep.facts.get("success") else 0.0
        outcome = [0.0] * n
        outcome[-1] = win
        fmt = [0.1 / n if s.ok else 0.0 for s in ep.steps] or [0.0]
        out.append(
            RewardResult(
                RewardBreakdown(
                    total=win + sum(fmt),
                    components={"outcome": win, "format": sum(fmt)},
                    per_step={"outcome": tuple(outcome), "format": tuple(fmt)},
                )
            )
        )
    return out


@pytest.fixture
def reward_fn():
    return outcome_and_format


@pytest.fixture
def dash(monkeypatch):
    """A fake dashboard (``fake_dashboard.FakeDashboard``) running, its token in
    ``DASHBOARD_TOKEN`` as the import command reads it."""
    from fake_dashboard import TOKEN, FakeDashboard

    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    server = FakeDashboard().start()
    yield server
    server.stop()
