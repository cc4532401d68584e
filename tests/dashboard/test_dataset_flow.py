"""A newcomer's dataset flow (upload, "Use in a new run", launch), three problems:

- the run form showed the upload's server path, cut off in its input, where they
  expected the name they gave it: the form offers their uploads by name and says which
  one the path reads (the path is still what the config stores);
- a refused upload came back with the file input empty and no word about it: the
  page's script sends the form with fetch (the page and the chosen file stay, each
  problem beside its field); sent as a plain form, the other fields are kept and the
  page says to choose the file again;
- a run of free-text answers on the built-in model from scratch cannot learn in any
  number of steps, and the form said only that 15 steps was short: the form's advice
  says so, and what to do instead (never for answers it can reach, as the bench's
  arithmetic with the calculator).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from chatmodels import build_chat_model
from dashtest import client_for, form_body
from django.core.files.uploadedfile import SimpleUploadedFile

from bench.make_arith_dataset import problems
from dashboard.library.answer_shapes import kind_of
from dashboard.models import Dataset, Run
from dashboard.pages import form_advice
from dashboard.pages.forms import default_config, values_from_config
from trainer.config import TrainConfig

pytestmark = pytest.mark.django_db

FREE = [
    ("What is the capital of France?", "Paris"),
    ("Who wrote Hamlet?", "William Shakespeare"),
    ("Name a primary colour.", "red"),
    ("What is the largest ocean?", "the Pacific Ocean"),
]
PLUS = [(f"What is {a} plus {b}?", str(a + b)) for a, b in ((5, 7), (3, 9), (8, 6))]


def jsonl(pairs, prompt="prompt", answer="answer") -> str:
    return "".join(json.dumps({prompt: p, answer: a}) + "\n" for p, a in pairs)


def upload(client, filename: str, content: str, **fields):
    file = SimpleUploadedFile(filename, content.encode())
    return client.post("/datasets/", {"file": file, **fields})


# --- 1. the run form names the dataset ----------------------------------------------


def test_use_in_a_new_run_names_the_dataset_and_keeps_its_path(
    data_root, owner, other, staff
):
    client = client_for(owner)
    content = jsonl(FREE, "q", "a")
    assert (
        upload(
            client, "x.jsonl", content, name="数学 <i>", prompt_key="q", answer_key="a"
        ).status_code
        == 302
    )
    theirs = upload(
        client_for(other),
        "y.jsonl",
        content,
        name="theirs",
        prompt_key="q",
        answer_key="a",
    )
    assert theirs.status_code == 302
    ds = Dataset.objects.get(owner=owner)
    shown = f"uploads/{owner.pk}/{Path(ds.path).name}"

    page = client.get(f"/runs/new/?env=dataset&dataset={ds.pk}").content.decode()
    # the path is what the config stores, as before
    assert re.search(
        rf'name="envp\.dataset\.path"[^>]*value="{re.escape(shown)}"', page
    )
    # the choice offers the upload by its name (escaped), chosen
    option = re.search(r'<option value="([^"]*)"[^>]*data-name="([^"]*)"[^>]*>', page)
    assert option and option.group(1) == shown
    assert option.group(2) == "数学 &lt;i&gt;.jsonl" and " selected>" in option.group(0)
    assert "数学 &lt;i&gt;.jsonl (4 rows)</option>" in page
    assert "<i>" not in page.split("data-dataset-choice-field", 1)[1].split("</div>")[0]
    named = re.search(r"data-dataset-named[^>]*>(.*?)</span>", page, re.S).group(1)
    assert (
        f'Reads your upload <a href="/datasets/{ds.pk}/">数学 &lt;i&gt;.jsonl</a>'
        in named
    )
    assert "prompt field <code>q</code>, answer field <code>a</code>" in named
    assert "theirs" not in page  # another user's uploads are not offered

    # A clone of a run that read it names it too (its config holds the real path).
    config = default_config("dataset", "grpo", {"path": ds.path})
    run = Run.objects.create(owner=owner, name="r", config=config)
    clone = client.get(f"/runs/{run.pk}/clone/").content.decode()
    assert re.search(r"<option [^>]*selected>数学 &lt;i&gt;\.jsonl", clone)
    assert "Reads your upload" in clone

    # Another path: nothing chosen, the line says what to do.
    plain = client.get("/runs/new/?env=dataset").content.decode()
    assert not re.search(r"<option [^>]*data-name[^>]*selected", plain)
    assert "Choose one of your uploads" in plain
    # No uploads: the line says where to upload one.
    none = client_for(staff).get("/runs/new/?env=dataset").content.decode()
    assert 'Upload one on <a href="/datasets/">Datasets</a>' in none


# --- 2. a refused upload ------------------------------------------------------------


def test_a_refused_plain_upload_keeps_the_fields_and_says_to_choose_the_file_again(
    data_root, owner
):
    client = client_for(owner)
    r = upload(
        client,
        "<b>rows.jsonl",
        jsonl(PLUS),
        name="a/b",
        prompt_key="prompt",
        answer_key="answer",
    )
    html = r.content.decode()
    assert r.status_code == 400 and Dataset.objects.count() == 0
    assert "<li>name: no path separators" in html  # the summary names the field
    beside = re.search(r'data-errors-for="name">(.*?)</ul>', html).group(1)
    assert beside.startswith("<li>no path separators")  # and beside it
    assert 'name="name" maxlength="120" value="a/b"' in html  # the field kept
    assert 'value="a/b" placeholder="the file\'s name" aria-invalid="true"' in html
    again = re.search(r"<span data-choose-again>(.*?)</span><ul>", html, re.S).group(1)
    assert "Choose the file" in again and "&lt;b&gt;rows.jsonl" in again
    assert "<b>rows" not in html
    r = upload(client, "rows.csv", "question,answer\n1 + 1 ?,2\n", prompt_key="q")
    html = r.content.decode()
    assert 'name="prompt_key" maxlength="64" value="q" aria-invalid="true"' in html
    assert re.search(r'data-errors-for="prompt_key"><li>line 2 has no', html)
    assert 'data-errors-for="name"></ul>' in html  # no problem there
    assert "data-choose-again" not in client.get("/datasets/").content.decode()
    # No file chosen at all: nothing to choose "again", the field says what is missing.
    r = client.post("/datasets/", {"name": "x", "prompt_key": "p", "answer_key": "a"})
    html = r.content.decode()
    assert r.status_code == 400 and "data-choose-again" not in html
    assert "choose a file" in html


def test_an_upload_sent_by_the_pages_script_is_answered_as_json(data_root, owner):
    client = client_for(owner)
    h = {"HTTP_ACCEPT": "application/json"}
    r = client.post(
        "/datasets/", {"file": SimpleUploadedFile("r.jsonl", b"{bad\n")}, **h
    )
    assert r.status_code == 400 and r["Content-Type"] == "application/json"
    assert r.json() == {
        "errors": ["file: line 1 is not valid JSON" + r.json()["errors"][0][30:]],
        "fields": {"file": [r.json()["fields"]["file"][0]]},
    }
    assert r.json()["fields"]["file"][0].startswith("line 1 is not valid JSON")
    file = SimpleUploadedFile("r.jsonl", jsonl(PLUS).encode())
    r = client.post("/datasets/", {"file": file, "answer_key": "a b"}, **h)
    assert r.status_code == 400
    assert r.json()["fields"] == {
        "answer_key": ["letters, digits, '_', '.' or '-' (1 to 64)"]
    }
    assert r.json()["errors"] == [
        "Answer field: letters, digits, '_', '.' or '-' (1 to 64)"
    ]
    file = SimpleUploadedFile("r.jsonl", jsonl(PLUS).encode())
    r = client.post("/datasets/", {"file": file}, **h)
    ds = Dataset.objects.get(owner=owner)
    assert r.status_code == 200 and r.json() == {"url": f"/datasets/{ds.pk}/"}
    file = SimpleUploadedFile("r.jsonl", jsonl(PLUS).encode())
    r = client.post("/datasets/", {"file": file}, **h)  # the name is taken
    assert r.status_code == 409
    assert r.json()["fields"] == {"name": ["you already have a dataset named r.jsonl"]}


# --- 3. advice for answers the built-in model cannot reach ---------------------------


def check(client, path: Path, **changes) -> dict:
    values = values_from_config(default_config("dataset", "grpo", {"path": str(path)}))
    values.update({"envp.dataset.holdout": "0", **changes})
    res = client.post("/runs/new/check/", form_body(values)).json()
    assert res["ok"] is True, res["errors"]
    return res["warnings"]


def test_free_text_answers_from_scratch_are_said_to_be_out_of_reach(
    data_root, owner_client, tmp_path
):
    free = data_root / "free.jsonl"
    free.write_text(jsonl(FREE))
    warnings = check(owner_client, free, steps="15")
    (message,) = warnings["envp.dataset.path"]
    assert message.startswith(
        "No number of steps teaches the built-in model these answers: all of the first 4"
    )
    assert "(line 1: “Paris” for “What is the capital of France?”)" in message
    assert "Model path" in message and "Init from run" in message and "calc" in message
    assert "steps" not in warnings  # "200 steps to watch it learn" is no advice here

    # A pretrained model: nothing to say.
    models = tmp_path / "models"
    models.mkdir()
    build_chat_model(models)
    assert "envp.dataset.path" not in check(
        owner_client,
        free,
        **{"model.path": str(models / "tiny-chat"), "model.device": "cpu"},
    )


def test_arithmetic_answers_are_not_free_text(data_root, owner_client):
    arith = data_root / "arith.jsonl"
    rows = problems(40, 0, ["add", "sub"], 20)
    arith.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the bench's dataset_arith: the calculator on
    assert check(owner_client, arith, **{"envp.dataset.tools": "calculator"}) == {}
    # the calculator off: the sums cannot be done in the model's head; said beside Tools
    warnings = check(owner_client, arith)
    assert "envp.dataset.path" not in warnings
    (message,) = warnings["envp.dataset.tools"]
    assert message.startswith("Add the calculator tool:")

    plus = data_root / "plus.jsonl"  # the newcomer's "What is 5 plus 7?" -> "12"
    plus.write_text(jsonl(PLUS))
    assert (
        "Add the calculator tool" in check(owner_client, plus)["envp.dataset.tools"][0]
    )
    assert "envp.dataset.tools" not in check(
        owner_client, plus, **{"envp.dataset.tools": "calculator"}
    )


def test_the_advice_leaves_out_a_warm_started_model_and_the_search_tool(data_root):
    free = data_root / "free.jsonl"
    free.write_text(jsonl(FREE))
    corpus = data_root / "corpus.txt"
    corpus.write_text("Paris is the capital of France.\n")

    def cfg(tools=(), **model) -> TrainConfig:
        params = {"path": str(free), "holdout": 0, "tools": list(tools)}
        if tools:
            params["corpus_path"] = str(corpus)
        env = {"name": "dataset", "params": params}
        return TrainConfig.model_validate({"env": env, "model": model, "steps": 300})

    assert "envp.dataset.path" in form_advice.warnings(cfg())
    assert form_advice.warnings(cfg(init_from_run="abc-123")) == {}
    assert "envp.dataset.path" not in form_advice.warnings(cfg(tools=["search"]))


@pytest.mark.parametrize(
    ("prompt", "answer", "calculator", "kind"),
    [
        ("tom has 3 apples and gets 5 more . how many apples ?", "8", True, "calc"),
        (
            "tom has 3 apples and gets 5 more . how many apples ?",
            "8",
            False,
            "needs_calc",
        ),
        ("Which is larger, 5 or 9?", "9", False, "copy"),
        ("Is the sky blue? Answer yes or no.", "Yes.", False, "copy"),
        ("What is the capital of France?", "Paris", True, "free"),
        ("How many legs does a spider have?", "8", False, "free"),
    ],
)
def test_kinds_of_answers(prompt, answer, calculator, kind):
    assert kind_of(prompt, answer, calculator) == kind
