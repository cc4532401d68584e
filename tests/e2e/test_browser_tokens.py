"""Tokens a person can read (issue 22.7), in a real browser: a chat model with a
byte-level BPE tokenizer and a ChatML template (tool tags special, as in Qwen's)
trains one step on a calculator dataset; its trajectory page shows each token as
the text it decodes to (no ``Ġ``/``Ċ``), the prompt's messages under their roles,
special tokens dimmed, and the raw piece on hover."""

from __future__ import annotations

import pytest
from conftest import login, shot

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TRAIN = """
import tempfile, json
from pathlib import Path
from django.contrib.auth import get_user_model
from dashboard.ingest import writer
from dashboard.runs import external
from tests.trainer.chatmodel import build_chat_model
from trainer.config import TrainConfig
from trainer.events import ListSink
from trainer.runner import run_from_config

tmp = Path(tempfile.mkdtemp())
model = build_chat_model(tmp)
data = tmp / "d.jsonl"
data.write_text(json.dumps({"prompt": "use the calculator: what is 7 + 5 ?",
                            "answer": "12"}) + "\\n")
cfg = TrainConfig.model_validate({
    "steps": 1, "seed": 0, "model": {"path": str(model)},
    "env": {"name": "dataset",
            "params": {"path": str(data), "tools": ["calculator"], "holdout": 0.0}},
    "rollout": {"tasks_per_step": 1, "group_size": 2, "max_action_tokens": 8},
    "reward": {"components": [{"name": "numeric_match", "weight": 1.0}]},
})
sink = ListSink()
run_from_config(cfg, sink)
alice = get_user_model().objects.get(username="alice")
run = external.do_create_external_run(alice, name="chat tokens", framework="agentic-rl")
writer.store(run.pk, [e for e in sink.events if e["type"] == "trajectory"])
print(json.dumps({"run": str(run.pk)}))
"""


def test_a_chat_models_tokens_read_as_text_with_turns_by_role(
    scripted_live, page, shots
):
    run = scripted_live.script(TRAIN)["run"]
    login(page, scripted_live.url)
    page.goto(f"{scripted_live.url}/runs/{run}/trajectories/1/0/0/")
    page.wait_for_selector("[data-heat] span[data-t]")
    heat = page.locator("[data-heat]").first
    seen = heat.inner_text()
    assert "Ġ" not in seen and "Ċ" not in seen
    assert "use the calculator" in seen  # words, not "u s e" pieces spaced apart
    roles = page.locator("[data-heat] .turn-role").all_inner_texts()
    assert [r.lower() for r in roles[:3]] == ["system", "user", "assistant"]
    special = page.locator("[data-heat] span.tsp").first
    assert special.inner_text() == "<|im_start|>"
    assert special.evaluate("e => getComputedStyle(e).opacity") == "0.5"
    # The raw piece on hover: a token with a leading space is "Ġ..." underneath.
    spaced = page.evaluate(
        "() => [...document.querySelectorAll('[data-heat] span[data-t]')]"
        ".find(s => /^ \\S/.test(s.textContent)).dataset.t"
    )
    page.locator(f"[data-heat] span[data-t='{spaced}']").hover()
    tip = page.locator("[data-tooltip]")
    assert "piece" in tip.inner_text() and "Ġ" in tip.inner_text()
    shot(page, shots, "tokens_readable")
