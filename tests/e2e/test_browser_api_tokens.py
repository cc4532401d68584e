"""The API tokens page in a browser: a new token, shown only once, comes with the
lines to paste already carrying it and buttons that copy them (a newcomer copied
the token, then had to splice it into the snippet's ``<token>`` by hand)."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]


def test_a_new_tokens_copy_buttons_copy_it_and_the_snippet_carries_it(live, page, ui):
    page.context.grant_permissions(
        ["clipboard-read", "clipboard-write"], origin=live.url
    )
    ui.login(page, live.url)
    page.goto(f"{live.url}/settings/tokens/")
    page.fill("input[name=name]", "workstation TRL")
    page.click("button[type=submit].primary")
    token = page.inner_text("[data-new-token]").strip()
    assert token and f"write_token={token}" in page.inner_text("#report-trackio")
    for target, want in (("#new-token", token), ("#report-trackio", token)):
        button = page.locator(f"button[data-copy='{target}']")
        assert button.is_visible()
        button.click()
        ui.until(page, f"document.querySelector(\"button[data-copy='{target}']\")"
                 ".textContent !== 'Copy token' && document.querySelector("
                 f"\"button[data-copy='{target}']\").textContent !== 'Copy'")  # fmt: skip
        said = button.inner_text()
        if said == "Copied":
            copied = page.evaluate("navigator.clipboard.readText()")
        else:  # no clipboard here: the text is selected for Ctrl-C
            assert said == "Selected: press Ctrl-C"
            copied = page.evaluate("window.getSelection().toString()")
        assert want in copied
