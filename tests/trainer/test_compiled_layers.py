"""``optim.compile``: the update's forwards through compiled layer parts (the MLP
and the norms of each decoder layer), checked on the CPU, where Inductor compiles
too: the same training as eagerly to float rounding, one graph per part class, the
eager modules back outside the update, and a failed compilation falling back."""

from __future__ import annotations

import logging

import pytest
import torch
import torch._dynamo
from option_registry import covers
from torch import nn
from torch._dynamo.utils import counters
from wiring import run, tiny

import trainer.update
from trainer.compiled_layers import (
    CompiledLayers,
    compilable_parts,
    compiled_layers,
    decoder_layers,
)
from trainer.config import ModelConfig
from trainer.policy import Policy


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


@pytest.fixture
def spied(monkeypatch):
    """The CompiledLayers the update asked for, in order."""
    built: list[CompiledLayers | None] = []

    def spy(model, strategy):
        built.append(compiled_layers(model, strategy))
        return built[-1]

    monkeypatch.setattr(trainer.update, "compiled_layers", spy)
    return built


def _model() -> nn.Module:
    torch.manual_seed(0)
    return Policy.build(ModelConfig(size="tiny"), ["a", "b"]).model


def test_a_llama_layers_mlp_and_norms_are_compiled_not_its_attention():
    model = _model()
    layers = decoder_layers(model)
    assert layers == list(model.model.layers)
    layer = layers[0]
    parts = compilable_parts(layer)
    assert parts == [layer.mlp, layer.input_layernorm, layer.post_attention_layernorm]


@pytest.mark.slow
@covers("optim.compile")
def test_a_compiled_update_trains_as_the_eager_one_through_compiled_parts(
    tmp_path, spied
):
    eager = run(tiny(steps=2), tmp_path)
    assert spied == [] and counters["stats"]["unique_graphs"] == 0
    compiled = run(tiny(steps=2, optim={"compile": True}), tmp_path)
    # One graph for the MLPs, one for the norms, shared by every layer; no
    # recompilation at the second step's other shapes.
    assert counters["stats"]["unique_graphs"] == 2
    assert len(spied) == 2 and spied[0] is spied[1]
    layers = spied[0]
    assert layers.proven and layers.failed is None
    # Outside the update the modules are their own again (rollouts ran eagerly).
    assert all("forward" not in vars(part) for part in layers.parts)
    assert [e["step"] for e in compiled.sink.of_type("step")] == [1, 2]
    for a, b in zip(eager.every_metrics(), compiled.every_metrics(), strict=True):
        assert b["reward"] == a["reward"]  # step 2 sampled the same tokens
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4, abs=1e-6)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
    want, got = eager.weights(), compiled.weights()
    for name, w in want.items():
        torch.testing.assert_close(got[name], w, atol=1e-4, rtol=0)


@pytest.mark.slow
def test_a_part_that_fails_to_compile_runs_the_update_eagerly(
    tmp_path, spied, monkeypatch, caplog
):
    def broken(fn, **kw):
        def call(*a, **k):
            raise RuntimeError("no compiler here")

        return call

    monkeypatch.setattr("trainer.compiled_layers.torch.compile", broken)
    eager = run(tiny(steps=2), tmp_path)
    with caplog.at_level(logging.WARNING, logger="trainer.compiled_layers"):
        fell_back = run(tiny(steps=2, optim={"compile": True}), tmp_path)
    layers = spied[0]
    assert not layers.on and "no compiler here" in layers.failed
    assert [r.getMessage() for r in caplog.records].count(layers.failed) == 1
    # The failed minibatch ran again eagerly: the same run, bit for bit.
    for name, w in eager.weights().items():
        assert torch.equal(fell_back.weights()[name], w), name


@pytest.mark.slow
def test_a_failure_in_a_later_micro_batch_runs_the_whole_minibatch_again_eagerly(
    tmp_path, spied, monkeypatch
):
    """The first micro-batch runs "compiled" (here: the eager forward), the second
    fails: the gradients of the first are dropped and the whole minibatch runs
    again eagerly, so the run is the eager one bit for bit."""
    real = trainer.update._forward_backward
    parts: list[int] = []

    def counted(*a, **k):
        parts.append(1)
        return real(*a, **k)

    def fails_from_the_second_part(fn, **kw):
        def call(*a, **k):
            if len(parts) >= 2:
                raise RuntimeError("no kernel for this part")
            return fn(*a, **k)

        return call

    monkeypatch.setattr(trainer.update, "_forward_backward", counted)
    monkeypatch.setattr(
        "trainer.compiled_layers.torch.compile", fails_from_the_second_part
    )
    micro = {"micro_batch_size": 2}
    eager = run(tiny(steps=2, optim=micro), tmp_path)
    parts.clear()
    fell_back = run(tiny(steps=2, optim={**micro, "compile": True}), tmp_path)
    layers = spied[0]
    assert not layers.on and "no kernel for this part" in layers.failed
    # 3 parts a minibatch: 2 tried, then 3 eagerly; 3 at step 2.
    assert len(parts) == 2 + 3 + 3
    for name, w in eager.weights().items():
        assert torch.equal(fell_back.weights()[name], w), name


def test_a_failure_after_a_compiled_minibatch_succeeded_is_raised():
    layers = CompiledLayers(decoder_layers(_model()))
    assert layers.give_up(RuntimeError("compile")) is True and not layers.on
    layers = CompiledLayers(decoder_layers(_model()))
    layers.proven = True
    assert layers.give_up(RuntimeError("out of memory")) is False and layers.on


def test_active_puts_the_compiled_forwards_in_place_and_takes_them_out():
    layers = CompiledLayers(decoder_layers(_model()))
    part = layers.parts[0]
    with pytest.raises(ValueError), layers.active():
        assert vars(part)["forward"] is layers.compiled[0]
        raise ValueError
    assert "forward" not in vars(part)
    layers.failed = "off"
    with layers.active():
        assert "forward" not in vars(part)


def test_fsdp_and_models_without_repeated_layers_run_eagerly(caplog):
    with caplog.at_level(logging.WARNING, logger="trainer.compiled_layers"):
        assert compiled_layers(_model(), "fsdp") is None
        assert compiled_layers(nn.Sequential(nn.Linear(2, 2)), "single") is None
    said = [r.getMessage() for r in caplog.records]
    assert said == [
        "optim.compile: FSDP's sharded layers run eagerly",
        "optim.compile: the model has no layer parts to compile",
    ]
    assert compiled_layers(_model(), "single") is not None


@pytest.mark.slow
def test_micro_batches_take_the_top_entropy_threshold_from_the_compiled_forward(
    tmp_path,
):
    """The threshold over the minibatch's entropies comes from a forward through
    the same compiled parts as the training forwards the mask is applied to: a
    token at the threshold lands on the same side as in one whole forward."""
    algo = {"agg": "token_mean", "top_entropy_quantile": 0.25}
    whole = run(tiny(algorithm=algo, optim={"compile": True}), tmp_path)
    micro = run(
        tiny(algorithm=algo, optim={"compile": True, "micro_batch_size": 4}), tmp_path
    )
    for a, b in zip(whole.trajectories(), micro.trajectories(), strict=True):
        assert [s["masked"] for s in a["segments"]] == [
            s["masked"] for s in b["segments"]
        ]
    for i, st in whole.optimizer_state().items():
        m = st["exp_avg"]
        torch.testing.assert_close(
            micro.optimizer_state()[i]["exp_avg"],
            m,
            rtol=1e-3,
            atol=1e-4 * float(m.abs().max()),
        )


class _TwoRanks:
    """This process as rank 0 of two; rank 1 reports ``other`` from its probe."""

    world = 2

    def __init__(self, other: str) -> None:
        self.other = other

    def all_gather_objects(self, obj):
        return [obj, self.other]


def test_ranks_agree_to_compile_before_the_first_minibatch():
    """Each part class's compiled forward and backward run once on this rank
    (no collective), then one gather: all succeeded, so compiled everywhere; a
    failure after that is raised, not retried eagerly on one rank (the others
    would be in the gradient all-reduce it left)."""
    model = _model()
    layers = CompiledLayers(decoder_layers(model))
    rng = torch.get_rng_state()
    layers.agree(_TwoRanks(other=""), model)
    assert layers.agreed and layers.on
    assert torch.equal(torch.get_rng_state(), rng)  # the run's streams untouched
    assert all(p.grad is None for p in model.parameters())  # the probe's dropped
    assert layers.give_up(RuntimeError("later")) is False and layers.on
    # Once per run.
    layers.agree(_TwoRanks(other="RuntimeError('late')"), model)
    assert layers.on


def test_a_failure_on_another_rank_runs_every_rank_eagerly(caplog):
    model = _model()
    layers = CompiledLayers(decoder_layers(model))
    with caplog.at_level(logging.WARNING, logger="trainer.compiled_layers"):
        layers.agree(_TwoRanks(other="RuntimeError('no triton')"), model)
    assert not layers.on and "rank 1" in layers.failed and "no triton" in layers.failed
    assert caplog.records[-1].getMessage() == layers.failed


def test_a_failure_on_this_rank_is_gathered_and_runs_every_rank_eagerly(
    monkeypatch,
):
    def broken(fn, **kw):
        def call(*a, **k):
            raise RuntimeError("no compiler on this rank")

        return call

    monkeypatch.setattr("trainer.compiled_layers.torch.compile", broken)
    gathered = []

    class Ranks(_TwoRanks):
        def all_gather_objects(self, obj):
            gathered.append(obj)
            return super().all_gather_objects(obj)

    model = _model()
    layers = CompiledLayers(decoder_layers(model))
    layers.agree(Ranks(other=""), model)
    assert "no compiler on this rank" in gathered[0]
    assert not layers.on and "rank 0" in layers.failed


def test_one_process_needs_no_agreement():
    from trainer.single import Single

    layers = CompiledLayers(decoder_layers(_model()))
    layers.agree(Single(), _model())
    assert not layers.agreed and layers.on
    assert layers.give_up(RuntimeError("compile")) is True  # the eager rerun


class _Block(nn.Module):
    """A decoder block whose one-tensor children include a dropout (no weights)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(6, 12), nn.SiLU(), nn.Linear(12, 6))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        return self.drop(self.mlp(x))


def test_the_probe_takes_parts_without_weights_and_each_parts_own_width():
    """A dropout has no weight to take a dtype from (the model's is used), and a
    part's input width is its own (its first linear layer's, a norm's weight's),
    the text model's hidden size for a composite config otherwise."""
    from trainer.compiled_layers import input_width

    class Composite(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([_Block(), _Block()])
            text = type("Text", (), {"hidden_size": 6})()
            self.config = type("Config", (), {"get_text_config": lambda self: text})()

    model = Composite()
    layers = CompiledLayers(decoder_layers(model))
    assert {type(p) for p in layers.parts} == {nn.Sequential, nn.Dropout}
    assert input_width(model.layers[0].mlp, model) == 6
    assert input_width(model.layers[0].drop, model) == 6  # the config's
    assert input_width(nn.LayerNorm(5), model) == 5
    layers.agree(_TwoRanks(other=""), model)
    assert layers.on, layers.failed
    assert all(p.grad is None for p in model.parameters())
