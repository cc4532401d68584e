"""Bring your own data and model, in a real browser against a real server whose
MODEL_ROOTS and DATA_ROOTS are the test's own directories: upload a JSONL dataset whose
task needs a calculator call, pick the chat model (built in the test) from the roots,
launch a 2-step run on the ``dataset`` environment, wait for it to finish, and open a
trajectory: chat-formatted turns, the model's tool call and the tool's answer."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_URL = re.compile(r".*/runs/([0-9a-f-]{36})/$")
QUESTIONS = [
    f"use the calculator: what is {a} + {b} ?" for a, b in ((7, 5), (3, 4), (12, 30))
]


def _chatmodels():
    path = Path(__file__).resolve().parents[1] / "dashboard" / "chatmodels.py"
    spec = importlib.util.spec_from_file_location("byo_chatmodels", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_upload_pick_launch_and_read_a_tool_call(roots_live, page, shots, ui, tmp_path):
    live = roots_live
    model = _chatmodels().build_tool_caller(live.model_root, QUESTIONS)
    rows = [
        {"prompt": q, "answer": str(sum(map(int, re.findall(r"\d+", q))))}
        for q in QUESTIONS
    ]
    upload = tmp_path / "calc_tasks.jsonl"
    upload.write_text("".join(json.dumps(r) + "\n" for r in rows))

    ui.login(page, live.url)
    page.goto(live.url + "/datasets/")
    page.set_input_files("[data-upload-form] input[type=file]", str(upload))
    page.click("[data-upload-form] button[type=submit]")
    page.wait_for_url(re.compile(r".*/datasets/\d+/$"))
    preview = page.text_content("[data-preview]")
    assert "use the calculator: what is 7 + 5 ?" in preview and "12" in preview
    ui.shot(page, shots, "byo_01_dataset_preview")

    page.click("[data-use-dataset]")
    page.wait_for_url(re.compile(r".*/runs/new/\?env=dataset&dataset=\d+$"))
    assert page.is_checked("input[name='env.name'][value='dataset']")
    stored = page.input_value("[name='envp.dataset.path']")
    # root-relative, as the model picker names a model: no server path is shown
    assert re.fullmatch(r"uploads/\d+/[\w.-]+\.jsonl", stored), stored
    assert (live.data_root / stored).is_file()
    # The built-in model from scratch: warm-start steps as the dataset demo has them.
    assert page.input_value("[name='model.warmstart_steps']") == "500"
    # The picker lists the chat model found under the model root.
    row = page.locator("[data-model-row='tiny-chat']")
    assert "yes" in row.text_content()  # it has a chat template
    row.locator("[data-model-pick]").click()
    assert (
        page.input_value("[name='model.path']")
        == model.relative_to(live.model_root).as_posix()
    )  # root-relative: no server path is shown
    # A pretrained model: the hint goes (waited for: the page's script may still load),
    # and so do the warm-start steps filled in for the model from scratch.
    page.locator("[data-warmstart-hint]").wait_for(state="hidden", timeout=10_000)
    assert page.input_value("[name='model.warmstart_steps']") == "0"
    page.click("[data-model-pick='']")  # the built-in model again: they come back
    assert page.input_value("[name='model.warmstart_steps']") == "500"
    row.locator("[data-model-pick]").click()
    assert page.input_value("[name='model.warmstart_steps']") == "0"
    page.fill("[name='envp.dataset.tools']", "calculator")
    page.fill("[name='envp.dataset.holdout']", "0")
    page.fill("[name='envp.dataset.max_turns']", "2")
    page.fill("[name=name]", "byo chat model")
    page.fill("[name=steps]", "2")
    page.select_option("[name='model.device']", "cpu")
    page.fill("[name='rollout.tasks_per_step']", "2")
    page.fill("[name='rollout.group_size']", "2")
    page.fill("[name='rollout.max_turns']", "2")
    page.fill("[name='rollout.max_action_tokens']", "48")
    # LoRA (shown once a pretrained model is picked) and the recording policy
    assert page.is_visible("[name='model.lora.r']")
    page.fill("[name='model.lora.r']", "4")
    page.fill("[name='record.every']", "2")
    ui.until(
        page,
        "document.querySelector('[data-check-status]').textContent.includes('Valid')",
        30,
    )
    ui.shot(page, shots, "byo_02_new_run_picked_model")
    page.click("[data-launch]")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.match(page.url).group(1)
    config = live.script(
        "from dashboard.models import Run\n"
        f"print(json.dumps(Run.objects.get(pk='{run_id}').config))"
    )
    assert config["model"]["lora"]["r"] == 4 and config["record"]["every"] == 2
    assert "LoRA r 4" in page.text_content("[data-lora-summary]")
    assert "every 2nd step" in page.text_content("[data-recording]")
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        400,
    )

    page.goto(f"{live.url}/runs/{run_id}/trajectories/")
    page.wait_for_selector(".rollout")
    page.locator(".rollout").first.click()
    page.wait_for_url(re.compile(r".*/trajectories/\d+/\d+/\d+/$"))
    text = page.text_content("main")
    for turn in ("<|im_start|>system", "<|im_start|>user", "<|im_start|>tool"):
        assert turn in text, turn
    assert (
        '<tool_call>{"name": "calculator", "arguments": {"expression": "7 + 5"}}'
        in text
    )
    tool = page.locator(".seg.kind-tool").first.text_content()
    assert "12" in tool  # the calculator ran: 7 + 5
    ui.shot(page, shots, "byo_03_trajectory_tool_call")
    page.guard.check()
