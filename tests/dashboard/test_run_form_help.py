"""The new-run form's help lines read for a user: no Python ``None``, the tools field's
separator and the tools there are, and which of the two "max turns" bounds an episode
(the smaller: ``DatasetSession.done`` at the environment's, ``rollout.max_turns``
truncates at the rollout's)."""

from __future__ import annotations

import html
import re

import pytest

from trainer.envs.tools import TOOLS

pytestmark = pytest.mark.django_db


def helps(owner_client) -> dict[str, str]:
    """Input name -> its help line, as the page shows them (every environment's)."""
    page = owner_client.get("/runs/new/").content.decode()
    fields = re.findall(
        r'data-field="([^"]+)".*?(?:<span class="help">(.*?)</span>|</div>)',
        page,
        re.S,
    )
    return {name: html.unescape(text) for name, text in fields}


def test_no_help_line_says_none(owner_client):
    shown = helps(owner_client)
    assert "envp.dataset.id_key" in shown and "envp.dataset.system_prompt" in shown
    said = {k: v for k, v in shown.items() if re.search(r"\bNone\b", v)}
    assert said == {}
    assert "blank: the row's line number" in shown["envp.dataset.id_key"]
    assert "blank: with tools" in shown["envp.dataset.system_prompt"]


def test_the_tools_help_says_the_separator_and_lists_the_tools(owner_client):
    text = helps(owner_client)["envp.dataset.tools"]
    assert "separated by commas" in text
    assert f"available: {', '.join(TOOLS.names())}." in text
    assert {"calculator", "search"} <= set(TOOLS.names())


def test_both_max_turns_helps_say_the_smaller_bounds_an_episode(owner_client):
    shown = helps(owner_client)
    env, rollout = shown["envp.dataset.max_turns"], shown["rollout.max_turns"]
    assert "smaller of this and Rollout's max turns ends an episode" in env
    assert "the smaller of the two bounds an episode" in rollout
    assert "dataset environment's max turns" in rollout
