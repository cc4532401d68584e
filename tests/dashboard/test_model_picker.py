"""The new-run form's model picker: model directories under the model roots, with
their parameter counts (weights never loaded) and whether they have a chat template."""

from __future__ import annotations

import json
import os

import pytest
from chatmodels import build_chat_model

from dashboard.library import model_dirs

pytestmark = pytest.mark.django_db


@pytest.fixture
def models(tmp_path, settings):
    root = tmp_path / "models"
    root.mkdir()
    settings.MODEL_ROOTS = [root]
    model_dirs.clear_cache()
    yield root
    model_dirs.clear_cache()


def test_the_picker_lists_a_chat_model_with_its_exact_parameter_count(
    models, tmp_path, settings, owner_client
):
    from transformers import AutoModelForCausalLM

    path = build_chat_model(models / "team")  # models/team/tiny-chat: depth 2
    want = sum(
        p.numel() for p in AutoModelForCausalLM.from_pretrained(path).parameters()
    )
    # Only a config: the count comes from its fields. Llama, V=100, H=8, I=16, L=1,
    # 2 heads, 1 KV head (head_dim 4), untied: embed 800 + q,o 2*8*8 + k,v 2*8*4
    # + MLP 3*8*16 + norms 2*8 + final norm 8 + head 800
    # = 800 + 128 + 64 + 384 + 16 + 8 + 800 = 2200.
    bare = models / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(
        json.dumps(
            {
                "vocab_size": 100,
                "hidden_size": 8,
                "intermediate_size": 16,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "tie_word_embeddings": False,
            }
        )
    )
    outside = tmp_path / "outside-model"
    outside.mkdir()
    (outside / "config.json").write_text("{}")
    os.symlink(outside, models / "link-out")  # never offered
    deep = models / "a" / "b" / "c"  # depth 3: beyond the scan
    deep.mkdir(parents=True)
    (deep / "config.json").write_text("{}")

    found = {m.name: m for m in model_dirs.list_models()}
    assert set(found) == {"team/tiny-chat", "bare"}
    chat = found["team/tiny-chat"]
    assert chat.params == want and chat.chat_template is True
    assert chat.root == "models"
    assert found["bare"].params == 2200 and found["bare"].chat_template is False
    # Without its weights file the chat model's count comes from config.json alone.
    for f in path.glob("*.safetensors"):
        f.unlink()
    assert model_dirs.param_count(path) == want

    html = owner_client.get("/runs/new/").content.decode()
    assert 'data-model-row="team/tiny-chat"' in html
    assert 'data-model-pick="team/tiny-chat"' in html
    assert "link-out" not in html


def test_the_scan_is_cached_and_bounded(models, settings, monkeypatch):
    for i in range(5):
        (models / f"m{i}").mkdir()
        (models / f"m{i}" / "config.json").write_text("{}")
    settings.MODEL_SCAN_SECONDS = 3600
    assert len(model_dirs.list_models()) == 5
    (models / "m9").mkdir()
    (models / "m9" / "config.json").write_text("{}")
    assert len(model_dirs.list_models()) == 5  # cached
    model_dirs.clear_cache()
    monkeypatch.setattr(model_dirs, "MAX_MODELS", 3)
    assert [m.name for m in model_dirs.list_models()] == ["m0", "m1", "m2"]


def test_users_see_a_root_label_and_a_relative_path_never_the_server_path(
    tmp_path, settings, owner, staff
):
    """Two roots: each model is shown and picked as its root's label and its path
    relative to that root, which the roots check resolves (the roots in order); a
    directory shadowed by the same path in an earlier root is not offered. Staff see
    the same page: the relative path is enough to pick and to find a model."""
    from dashtest import client_for

    from dashboard.library import roots

    first, second = tmp_path / "srv-a" / "models", tmp_path / "srv-b" / "weights"
    for root, name in [(first, "small"), (second, "big"), (second, "small")]:
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
    (first / "big-notes").mkdir()  # no config.json: not a model
    settings.MODEL_ROOTS = [first, second]
    model_dirs.clear_cache()
    try:
        found = [(m.root, m.name) for m in model_dirs.list_models()]
        assert found == [("models", "small"), ("weights", "big")]
        for user in (owner, staff):
            html = client_for(user).get("/runs/new/").content.decode()
            picker = html[html.index("data-model-picker") :].split("</table>")[0]
            assert "<td>weights</td>" in picker and 'data-model-pick="big"' in picker
            assert str(tmp_path) not in html and "srv-b" not in html
        # What the submit checks (services.check_platform): the picked path passes.
        checked, errors = roots.check_paths({"model": {"path": "big"}})
        assert errors == [] and checked["model"]["path"] == str(
            (second / "big").resolve()
        )
    finally:
        model_dirs.clear_cache()
