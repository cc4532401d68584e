"""The answer is on the page (issue 22.8): a trajectory shows the reference answer
and what the environment parsed from the policy's final turn beside its reward, and
a task's history shows the task's prompt, by turn, not only its id."""

from __future__ import annotations

from html import escape

import pytest
from django.urls import reverse

from dashboard.ingest import writer
from dashboard.models import GroupPrompt, Run

pytestmark = pytest.mark.django_db

SYSTEM = "You can call tools by writing <tool_call>{json}</tool_call>."
QUESTION = "what is <b>7</b> + 5 ? café 中文 🙂"  # model and dataset text: untrusted
PROMPT = (
    f"<|im_start|>system\n{SYSTEM}<|im_end|>\n"
    f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
)
ANSWER = "The sum is <i>12</i>, so \\boxed{12}"


def traj(index=0, facts=None, task="calc-1", step=1):
    return {
        "type": "trajectory",
        "step": step,
        "group": 0,
        "index": index,
        "task_id": task,
        "reward": 1.0,
        "facts": facts if facts is not None else {},
        "segments": [
            {"turn": 0, "kind": "prompt", "text": PROMPT, "mask": "prompt", "n": 40},
            {"turn": 0, "kind": "action", "text": f"{ANSWER} ({index})"},
        ],
    }


@pytest.fixture
def run(owner):
    return Run.objects.create(owner=owner, name="r", config={}, external=True)


def page(client, run, index=0):
    r = client.get(f"/runs/{run.pk}/trajectories/1/0/{index}/")
    assert r.status_code == 200
    return r.content.decode()


def answers_block(html):
    return html.split("data-answers>")[1].split("</div>")[0]


def test_the_reference_and_the_parsed_answer_sit_beside_the_reward(owner_client, run):
    facts = {"answer": ANSWER, "reference": "12", "success": False}
    writer.store(run.pk, [traj(facts=facts)])
    block = answers_block(page(owner_client, run))
    assert "reference answer <code data-reference>12</code>" in block
    assert f"<code data-parsed>{escape(ANSWER)}</code>" in block  # escaped
    assert "<i>12</i>" not in block
    assert "read as 12" in block  # the number a numeric match reads from it
    assert "does not match the reference" in block
    # The reward shows once, in the line just above, not again beside the answers.
    assert "reward <strong>" not in block
    head = page(owner_client, run).split("data-answers>")[0]
    assert head.count("reward <strong>1</strong>") == 1


@pytest.mark.parametrize(
    ("answer", "read_as"),
    [
        ("The answer is 12", "12"),  # the number a numeric match reads: it tells
        ("\\boxed{12}", "12"),
        ("7", None),  # "7" read as 7 is noise
        (" 7 ", None),
        ("1,234", None),
        ("7.0", None),
    ],
)
def test_read_as_shows_only_where_the_number_differs_from_the_text(
    owner_client, run, answer, read_as
):
    facts = {"answer": answer, "reference": "12", "success": read_as == "12"}
    writer.store(run.pk, [traj(facts=facts)])
    block = answers_block(page(owner_client, run))
    if read_as is None:
        assert "read as" not in block and "data-parsed-number" not in block
    else:
        assert f"read as {read_as}<" in block


def test_a_missed_answer_that_was_paid_says_which_term_paid_it_and_why(
    owner_client, run
):
    facts = {"answer": 11, "expected": 12, "success": False, "partial": 0.5,
             "computed_expected": True}  # fmt: skip
    t = traj(facts=facts)
    t["reward"] = 0.6
    t["rewards"] = {"total": 0.6, "components": {"outcome": 0.5, "format": 0.1,
                                                "<b>x</b>": 0.0}}  # fmt: skip
    writer.store(run.pk, [t])
    block = answers_block(page(owner_client, run))
    assert "does not match the reference" in block and "paid anyway" in block
    assert "<code>outcome</code> 0.5" in block
    assert "the calculator computed the reference value" in block
    assert "<code>format</code> 0.1" in block
    assert "each turn that parsed as a tool call or an answer" in block
    assert "&lt;b&gt;" not in block  # a term that paid nothing is not listed
    # a match, or a miss that nothing paid, has no such line
    t = traj(1, facts={**facts, "partial": 0.0})
    t["rewards"] = {"components": {"outcome": 0.0}}
    writer.store(run.pk, [t])
    assert "paid anyway" not in answers_block(page(owner_client, run, index=1))


def test_numeric_match_paid_for_the_answers_last_number_says_so_not_tool_credit(
    owner_client, run
):
    """A garbled answer ending in the reference's number: numeric_match pays it
    by its rule (the last number), with no tool call in the episode."""
    facts = {"answer": "xq:k argu 2essio 2", "reference": "2", "success": False}
    t = traj(facts=facts)
    t["rewards"] = {"total": 1.0, "components": {"numeric_match": 1.0}}
    writer.store(run.pk, [t])
    block = answers_block(page(owner_client, run))
    assert "its last number, 2, is the reference&#x27;s" in block
    assert "tool credit" not in block
    # a last number that is not the reference's: the credit came from a tool call
    t = traj(1, facts={**facts, "answer": "7"})
    t["rewards"] = {"total": 0.5, "components": {"numeric_match": 0.5}}
    writer.store(run.pk, [t])
    assert "tool credit" in answers_block(page(owner_client, run, index=1))


def test_an_episode_without_a_final_answer_says_so(owner_client, run):
    writer.store(run.pk, [traj(facts={"answer": None, "reference": "12"})])
    block = answers_block(page(owner_client, run))
    assert "none: the episode ended without a final answer" in block
    assert "read as" not in block


def test_the_calc_environments_expected_and_given_answers_show(owner_client, run):
    facts = {"answer": 11, "expected": 12, "success": False}
    writer.store(run.pk, [traj(facts=facts), traj(1, facts={"success": True})])
    block = answers_block(page(owner_client, run))
    assert "<code data-reference>12</code>" in block
    assert "<code data-parsed>11</code>" in block
    # an environment with no reference: no answers line, nothing made up
    assert "data-answers" not in page(owner_client, run, index=1)


def test_the_task_page_shows_the_tasks_prompt_by_turn(owner_client, run):
    # Two rollouts of a group: their prompt is stored once, as the group's.
    writer.store(run.pk, [traj(0), traj(1)])
    assert GroupPrompt.objects.filter(run=run).count() == 1
    r = owner_client.get(reverse("pages:task_history", args=[run.pk, "calc-1"]))
    html = r.content.decode()
    section = html.split("data-task-prompt")[1].split("</section>")[0]
    assert 'data-prompt-turn="system"' in section
    assert 'data-prompt-turn="user"' in section
    assert 'data-prompt-turn="assistant"' not in section  # the bare generation prompt
    assert escape(SYSTEM) in section and escape(QUESTION) in section
    assert "<b>7</b>" not in section
    assert "&lt;|im_start|&gt;" not in section and "&lt;|im_end|&gt;" not in section


def test_a_task_without_a_recorded_prompt_says_so(owner_client, run):
    t = traj()
    t["segments"] = t["segments"][1:]
    writer.store(run.pk, [t])
    r = owner_client.get(reverse("pages:task_history", args=[run.pk, "calc-1"]))
    assert "No prompt was recorded" in r.content.decode()


def test_prompts_of_the_common_templates_read_as_turns():
    from dashboard.reads.history import PromptTurn, prompt_turns

    llama3 = (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief."
        "<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    want = [PromptTurn("system", "Be brief."), PromptTurn("user", "2+2?")]
    assert prompt_turns(llama3) == want
    gemma = "<bos><start_of_turn>user\n2+2?<end_of_turn>\n<start_of_turn>model\n"
    assert prompt_turns(gemma) == [PromptTurn("user", "2+2?")]
    # the built-in word model: no template, one user turn
    assert prompt_turns("<bos> what is 3 + 4") == [PromptTurn("user", "what is 3 + 4")]


def test_a_steps_label_says_what_the_action_was(owner_client, run):
    """A final answer is not labelled a tool call; text in an environment without
    tools is text; an unparsed call reads "malformed tool call"."""
    t = traj(facts={"answer": "12", "reference": "12", "success": True})
    t["segments"] = [
        {"turn": 0, "kind": "prompt", "text": PROMPT, "mask": "prompt"},
        *({"turn": i, "kind": "action", "text": f"a{i}"} for i in range(4)),
    ]
    t["steps"] = [
        {"tool": "calculator", "ok": True},
        {"tool": None, "ok": True},
        {"tool": None, "ok": False},
        {"tool": "answer", "ok": True},
    ]
    writer.store(run.pk, [t])
    html = page(owner_client, run)
    kinds = [
        " ".join(k.split("</span>", 1)[0].split())
        for k in html.split("data-step-kind>")[1:]
    ]
    assert kinds == [
        "tool call <code>calculator</code>",
        "text",
        '<span class="sev-critical">malformed',
        "final answer",
    ]
    # One phrase, not "tool call unparsed malformed" (a walk read that).
    assert html.count("malformed</span> tool call</span>") == 1
    assert html.count("malformed</span>") == 1


def test_step_rewards_summing_past_the_float_range_still_show_the_page(
    owner_client, run
):
    """math.fsum raises on finite terms whose sum overflows (1e308 twice) and on
    inf + -inf: the attribution check sums them as floats do."""
    t = traj(facts={"answer": "12", "reference": "12", "success": True})
    t["rewards"] = {
        "total": 1e308,
        "components": {"a": 1e308, "b": 1e308},
        "per_step": {"a": [1e308, 1e308], "b": [float("inf"), float("-inf")]},
    }
    writer.store(run.pk, [t])
    html = page(owner_client, run)
    assert "data-step-total" in html


def test_calcs_digit_words_are_explained_beside_its_answers(owner, owner_client):
    """ "= 1 7" under "reference answer 17" read as a glitch: the note says why."""
    calc = Run.objects.create(owner=owner, name="c", config={"env": {"name": "calc"}})
    facts = {"answer": 17, "expected": 17, "success": True}
    for r in (calc, Run.objects.create(owner=owner, name="d", config={})):
        writer.store(r.pk, [traj(facts=facts)])
    block = answers_block(page(owner_client, calc))
    assert "data-digit-words" in block and '("1 7" is 17)' in block
    other = Run.objects.exclude(pk=calc.pk).get(name="d")
    assert "data-digit-words" not in page(owner_client, other)
