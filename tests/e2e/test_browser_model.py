"""A newcomer's run keeps its model: launch from the form's defaults (made small), wait
for it to finish, download the model from the run page and load it with transformers,
then start a new run from this one's checkpoint."""

from __future__ import annotations

import re
import tarfile

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

RUN_URL = re.compile(r".*/runs/([0-9a-f-]{36})/$")


def test_download_the_model_from_the_run_page_and_start_from_it(
    live, page, shots, ui, tmp_path
):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ui.login(page, live.url)
    page.goto(live.url + "/runs/new/")
    page.fill("[name=name]", "my first model")
    page.fill("[name=steps]", "2")
    page.select_option("[name='model.device']", "cpu")
    page.fill("[name='model.warmstart_steps']", "0")
    page.fill("[name='rollout.tasks_per_step']", "2")
    page.fill("[name='rollout.group_size']", "2")
    page.fill("[name='rollout.max_turns']", "2")
    page.click("[data-launch]")
    page.wait_for_url(RUN_URL)
    run_id = RUN_URL.match(page.url).group(1)
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        300,
    )
    # Without a reload: the page no longer says "live" but "up to date", and the
    # Model box offers the checkpoint the run kept at its end.
    ui.until(page, "document.querySelector('[data-model] [data-model-step]')", 30)
    assert "The checkpoint of step 2" in page.text_content("[data-model]")
    assert page.text_content("[data-live-text]") == "up to date"
    page.reload()
    assert page.text_content("[data-model-link]") == "Model · step 2"  # at the top
    page.click("[data-model-link]")
    section = page.locator("[data-model]")
    assert "The checkpoint of step 2, trained from" in section.text_content()
    assert page.locator("[data-download='adapter']").count() == 0  # no LoRA
    ui.shot(page, shots, "model_01_run_page_model_section", full=False)

    with page.expect_download() as info:
        page.click("[data-download='model']")
    download = info.value
    assert download.suggested_filename == "my-first-model-model-step-2.tar"
    saved = tmp_path / download.suggested_filename
    download.save_as(saved)
    with tarfile.open(saved) as tar:
        tar.extractall(tmp_path, filter="data")
    got = tmp_path / "my-first-model-model-step-2"
    model = AutoModelForCausalLM.from_pretrained(got).eval()
    tok = AutoTokenizer.from_pretrained(got)
    ids = torch.tensor([tok.encode("1 + 2")])
    assert model(ids).logits.shape[-1] == len(tok)

    page.click("[data-start-from]")
    page.wait_for_url(re.compile(rf".*/runs/{run_id}/clone/\?start=checkpoint$"))
    assert page.input_value("[name='model.init_from_run']") == run_id
    assert page.input_value("[name=name]") == "my first model (continued)"
    ui.until(
        page,
        "document.querySelector('[data-check-status]').textContent.includes('Valid')",
        30,
    )
    ui.shot(page, shots, "model_02_start_from_this_run")
    page.click("[data-launch]")
    page.wait_for_url(RUN_URL)
    child = RUN_URL.match(page.url).group(1)
    assert child != run_id
    config = live.script(
        "from dashboard.models import Run\n"
        f"print(json.dumps(Run.objects.get(pk='{child}').config))"
    )
    assert config["model"]["init_from_run"] == run_id
    ui.until(
        page,
        "document.querySelector('[data-run-status] .badge').textContent === 'succeeded'",
        300,
    )
    page.guard.check()
