"""A newcomer's dataset flow in a real browser: an upload refused, first by the page
(a name with a slash) then by the server (a prompt field its rows lack), keeps the
chosen file and the other fields, each problem beside its field; "Use in a new run"
shows the dataset by the name it was given (the path still what the config stores);
and for free-text answers on the built-in model from scratch the form's advice says
no number of steps will teach them. Without the page's script, a refusal keeps the
fields and says to choose the file again. Screenshots: /tmp/dsflow-*.png.

On the ``live`` server (its data root under its own var directory), not
``roots_live``: a visit to the run form there caches the model roots' listing
(``MODEL_SCAN_SECONDS``), and a test that builds a model in them next would not see it."""

from __future__ import annotations

import json
import re
import uuid

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FREE = [
    ("What is the capital of France?", "Paris"),
    ("Who wrote Hamlet?", "William Shakespeare"),
    ("Name a primary colour.", "red"),
    ("What is the largest ocean?", "the Pacific Ocean"),
]
SHOTS = "/tmp/dsflow-{}.png"


def _file(tmp_path, name: str):
    path = tmp_path / name
    path.write_text(
        "".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in FREE)
    )
    return path


def _chosen(page) -> str:
    return page.evaluate(
        "(() => { const f = document.querySelector('[data-upload-form] input[type=file]');"
        " return f.files.length ? f.files[0].name : ''; })()"
    )


def test_refused_uploads_keep_the_file_and_the_form_names_the_dataset(
    live, page, ui, tmp_path
):
    tag = uuid.uuid4().hex[:6]
    upload = _file(tmp_path, f"capitals-{tag}.jsonl")
    name = f"capitals <i>{tag}"
    ui.login(page, live.url)
    page.goto(live.url + "/datasets/")
    form = "[data-upload-form]"
    page.set_input_files(f"{form} input[type=file]", str(upload))

    # Refused by the page: nothing sent, the problem beside the name.
    page.fill(f"{form} [name=name]", "a/b")
    page.click(f"{form} button[type=submit]")
    beside = page.locator("[data-errors-for='name'] li")
    beside.wait_for()
    assert beside.text_content().startswith("no path separators")
    assert page.get_attribute(f"{form} [name=name]", "aria-invalid") == "true"
    assert "name: no path separators" in page.text_content("[data-upload-errors]")
    assert page.url.endswith("/datasets/") and _chosen(page) == upload.name

    # Refused by the server (its rows have no 'question'): the page stays, the file too.
    page.fill(f"{form} [name=name]", name)
    assert page.locator("[data-errors-for='name'] li").count() == 0  # cleared on edit
    page.fill(f"{form} [name=prompt_key]", "question")
    page.click(f"{form} button[type=submit]")
    beside = page.locator("[data-errors-for='prompt_key'] li")
    beside.wait_for()
    assert beside.text_content().startswith("line 1 has no 'question' field")
    summary = page.text_content("[data-upload-errors]")
    assert "Prompt field: line 1 has no 'question' field" in summary
    assert "again" not in summary  # the file is still chosen: nothing to choose again
    assert page.get_attribute(f"{form} [name=prompt_key]", "aria-invalid") == "true"
    assert _chosen(page) == upload.name
    assert page.input_value(f"{form} [name=name]") == name
    page.screenshot(path=SHOTS.format("1-refused"), full_page=False)

    # Fixed: stored, and its page opens.
    page.fill(f"{form} [name=prompt_key]", "prompt")
    page.click(f"{form} button[type=submit]")
    page.wait_for_url(re.compile(r".*/datasets/\d+/$"))
    assert page.text_content("h1") == f"{name}.jsonl"

    # "Use in a new run": the form shows the dataset by its name.
    page.click("[data-use-dataset]")
    page.wait_for_url(re.compile(r".*/runs/new/\?env=dataset&dataset=\d+$"))
    choice = page.locator("[data-dataset-choice]")
    selected = choice.evaluate("s => s.selectedOptions[0].textContent")
    assert selected == f"{name}.jsonl (4 rows)"
    named = page.text_content("[data-dataset-named]")
    assert named.startswith(f"Reads your upload {name}.jsonl: 4 rows")
    path = page.input_value("[name='envp.dataset.path']")
    assert re.fullmatch(r"uploads/\d+/[\w.-]+\.jsonl", path), path

    # Free-text answers, the built-in model from scratch: the advice says so.
    advice = page.locator("[data-warning-for='envp.dataset.path']")
    advice.wait_for(timeout=30_000)
    text = advice.text_content()
    assert "No number of steps teaches the built-in model these answers" in text
    assert "“Paris” for “What is the capital of France?”" in text
    assert "No number of steps teaches" in page.text_content("[data-check-warnings]")
    page.locator("[data-dataset-choice-field]").scroll_into_view_if_needed()
    page.screenshot(path=SHOTS.format("2-form"), full_page=False)
    page.screenshot(path=SHOTS.format("3-form-full"), full_page=True)

    # Another file: the path is for typing; the upload chosen again fills it back.
    choice.select_option("")
    assert page.input_value("[name='envp.dataset.path']") == ""
    assert page.text_content("[data-dataset-named]").startswith(
        "Choose one of your uploads"
    )
    choice.select_option(path)
    assert page.input_value("[name='envp.dataset.path']") == path
    page.fill("[name='envp.dataset.path']", "other.jsonl")
    assert choice.input_value() == ""
    page.fill("[name='envp.dataset.path']", path)  # typing its path names it again
    assert choice.evaluate("s => s.selectedOptions[0].textContent") == selected
    page.guard.check()


def test_without_the_script_a_refusal_says_to_choose_the_file_again(
    live, browser, ui, tmp_path
):
    upload = _file(tmp_path, f"plain-{uuid.uuid4().hex[:6]}.jsonl")
    context = browser.new_context(
        java_script_enabled=False, viewport={"width": 1360, "height": 900}
    )
    page = context.new_page()
    try:
        ui.login(page, live.url)
        page.goto(live.url + "/datasets/")
        page.set_input_files("[data-upload-form] input[type=file]", str(upload))
        page.fill("[data-upload-form] [name=name]", "kept name")
        page.fill("[data-upload-form] [name=answer_key]", "reference")
        page.click("[data-upload-form] button[type=submit]")
        page.wait_for_load_state()
        again = page.text_content("[data-choose-again]")
        assert again.startswith(f"Choose the file ({upload.name}) again")
        assert "Answer field: line 1 has no 'reference' field" in page.text_content(
            "[data-upload-errors]"
        )
        beside = page.text_content("[data-errors-for='answer_key']")
        assert beside.startswith("line 1 has no 'reference' field")
        assert page.input_value("[data-upload-form] [name=name]") == "kept name"
        assert page.input_value("[data-upload-form] [name=answer_key]") == "reference"
        page.screenshot(path=SHOTS.format("4-plain-refused"), full_page=False)
    finally:
        context.close()
