"""Tokens a person can read (issue 22.7), in a real browser: a chat model with a
byte-level BPE tokenizer and a ChatML template (tool tags special, as in Qwen's)
trains one step on a calculator dataset; its trajectory page shows each token as
the text it decodes to (no ``Ġ``/``Ċ``), the prompt's messages under their roles,
special tokens dimmed, and the raw piece on hover."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

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
    # A prompt token's numbers were never computed: said so, not "NaN".
    assert "NaN" not in tip.inner_text() and "not computed" in tip.inner_text()
    shot(page, shots, "tokens_readable")


RUN_URL = re.compile(r".*/runs/([0-9a-f-]{36})/$")
QUESTIONS = [
    f"use the calculator: what is {a} + {b} ? café 中文 🙂"
    for a, b in ((7, 5), (3, 4), (12, 30))
]


def _chatmodels():
    path = Path(__file__).resolve().parents[1] / "dashboard" / "chatmodels.py"
    spec = importlib.util.spec_from_file_location("tokens_chatmodels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _launch(page, live, ui, upload: Path) -> str:
    page.goto(live.url + "/datasets/")
    page.set_input_files("[data-upload-form] input[type=file]", str(upload))
    page.click("[data-upload-form] button[type=submit]")
    page.wait_for_url(re.compile(r".*/datasets/\d+/$"))
    page.click("[data-use-dataset]")
    page.wait_for_url(re.compile(r".*/runs/new/\?env=dataset&dataset=\d+$"))
    page.locator("[data-model-row='tiny-chat'] [data-model-pick]").click()
    page.locator("[data-warmstart-hint]").wait_for(state="hidden", timeout=10_000)
    page.fill("[name='envp.dataset.tools']", "calculator")
    page.fill("[name='envp.dataset.holdout']", "0")
    page.fill("[name='envp.dataset.max_turns']", "2")
    page.fill("[name=name]", "readable tokens")
    page.fill("[name=steps]", "3")
    page.select_option("[name='model.device']", "cpu")
    page.fill("[name='rollout.tasks_per_step']", "2")
    page.fill("[name='rollout.group_size']", "2")
    page.fill("[name='rollout.max_turns']", "2")
    page.fill("[name='rollout.max_action_tokens']", "48")
    page.fill("[name='record.every']", "1")
    ui.until(
        page,
        "document.querySelector('[data-check-status]').textContent.includes('Valid')",
        30,
    )
    page.click("[data-launch]")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.match(page.url).group(1)
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        400,
    )
    return run_id


def test_a_chat_models_trajectory_reads_as_text_by_turn(
    roots_live, page, shots, ui, tmp_path
):
    live = roots_live
    _chatmodels().build_tool_caller(live.model_root, QUESTIONS)
    rows = [
        {"prompt": q, "answer": str(sum(map(int, re.findall(r"\d+", q))))}
        for q in QUESTIONS
    ]
    upload = tmp_path / "calc_unicode.jsonl"
    upload.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ui.login(page, live.url)
    run_id = _launch(page, live, ui, upload)

    page.goto(f"{live.url}/runs/{run_id}/trajectories/?step=3")
    page.wait_for_selector(".rollout")
    page.locator(".rollout").first.click()
    page.wait_for_url(re.compile(r".*/trajectories/\d+/\d+/\d+/$"))
    ui.shot(page, shots, "tokens_01_trajectory")
    visible = page.inner_text("main")
    # Readable: the decoded text, never the byte-level alphabet or split characters.
    for internal in ("Ġ", "Ċ", "\ufffd", "ä¸"):
        assert internal not in visible, internal
    assert "café 中文 🙂" in visible
    # The turns by role, each labelled.
    labels = page.locator("[data-heat] .turn-role").all_inner_texts()
    assert {"system", "user", "assistant", "tool"} <= {
        x.strip().lower() for x in labels
    }
    # The special tokens are there, dimmed.
    special = page.locator(".heat .tsp").all_inner_texts()
    assert "<|im_start|>" in special and "<tool_call>" in special
    # The executed tool call: the call, and the calculator's answer in the tool turn.
    assert '"name": "calculator"' in visible
    observation = page.locator(".seg.kind-tool [data-heat]").first.inner_text()
    assert "tool" in observation.lower() and re.search(r"\b12\b", observation)
    # Hovering a token shows its raw piece beside its numbers.
    token = page.locator(".heat span[data-t]").filter(has_text="calculator").first
    token.hover()
    tip = page.locator("[data-tooltip]")
    tip.wait_for(state="visible")
    assert "piece" in tip.inner_text() and "advantage" in tip.inner_text()
    ui.shot(page, shots, "tokens_02_trajectory_hover", full=False)
    # The answer beside the reward.
    answers = page.inner_text("[data-answers]")
    assert "reference" in answers and "parsed" in answers
    # The task page shows the prompt.
    page.click("[data-task-link]")
    page.wait_for_url(re.compile(r".*/tasks/.+/$"))
    prompt = page.inner_text("[data-task-prompt]")
    assert "use the calculator: what is" in prompt and "café 中文 🙂" in prompt
    ui.shot(page, shots, "tokens_03_task_page")
    page.guard.check()
