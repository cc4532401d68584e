"""Every option of the run schema that changes the math has a test showing its
effect through the real loop (``@covers`` in ``option_registry``), or an exemption
here with its reason. A new option fails this test until it has one or the other."""

from __future__ import annotations

import importlib
import types
import typing
from pathlib import Path

from option_registry import COVERED
from pydantic import BaseModel

from trainer.config import TrainConfig

# Subtrees and options that do not change the RL math, or whose effect is shown
# where they live; each with its reason.
EXEMPT: dict[str, str] = {
    "name": "a label",
    "env": "the environment's own parameters (its tasks): tests/trainer/test_env_*.py",
    "reward": "reward components and judges: tests/rewards/",
    "record": "what is stored of a step, not what is trained: test_recording.py",
    "eval": "held-out evaluation after the update, never trained on: test_evaluate.py",
    "resources": "processes share the one-process math exactly: test_distributed.py, "
    "test_fsdp.py",
    "model.path": "which pretrained weights: test_chat_lora.py, test_policy.py",
    "model.size": "which default architecture: test_policy.py",
    "model.device": "where it runs: test_gpu_path.py",
    "model.dtype": "number format: test_gpu_path.py",
    "model.init_from_run": "which starting weights: test_init_from_run.py",
    "model.warmstart_steps": "behaviour cloning before RL: test_loop.py warm start",
    "model.warmstart_lr": "behaviour cloning before RL: test_loop.py warm start",
    "model.warmstart_batch": "behaviour cloning before RL: test_loop.py warm start",
    "model.lora": "which weights train (adapters): test_chat_lora.py",
}


def _models(annotation) -> list[type[BaseModel]]:
    """The pydantic models an annotation holds (``X``, ``X | None``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [m for a in typing.get_args(annotation) for m in _models(a)]
    return []


def schema_options(model: type[BaseModel] = TrainConfig, prefix: str = "") -> list[str]:
    """Every leaf option of the schema as a dotted path, walking nested models."""
    out = []
    for name, field in model.model_fields.items():
        path = prefix + name
        nested = _models(field.annotation)
        if nested and path not in EXEMPT:
            for sub in nested:
                out += schema_options(sub, path + ".")
        else:
            out.append(path)
    return out


def _load_option_tests() -> None:
    """Import every test module of this folder that registers with ``@covers``."""
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        if path.name != Path(__file__).name and "@covers(" in path.read_text():
            importlib.import_module(path.stem)


def _exempt(path: str) -> bool:
    return any(path == e or path.startswith(e + ".") for e in EXEMPT)


def test_every_option_has_a_wiring_test_or_a_stated_exemption():
    _load_option_tests()
    missing = [p for p in schema_options() if p not in COVERED and not _exempt(p)]
    assert not missing, f"options with no @covers test and no exemption: {missing}"


def test_the_registry_names_real_options_only():
    _load_option_tests()
    real = set(schema_options())
    assert not sorted(set(COVERED) - real), "unknown options in @covers"
    assert not sorted(set(EXEMPT) - real), "unknown options in EXEMPT"
    assert not [p for p in COVERED if _exempt(p)], "covered and exempt at once"


def test_the_walk_reaches_nested_options():
    options = schema_options()
    assert "algorithm.rollout_correction.cap" in options
    assert "optim.minibatches" in options and "rollout.temperature" in options
    assert "env" in options and "model.lora" in options  # exempt: not walked into
