"""The update's forwards through ``torch.compile``d decoder layers (``optim.compile``).

On a GPU the update of a small model spends most of its time outside its matrix
products: a transformers decoder layer run eagerly launches a kernel for every
elementwise step (the RMS norms in float32 and their casts, SiLU and its product),
each reading and writing every token's activations. On an H100 the 0.5B bench
model's update spent ~70 of ~420 ms in matrix products (docs/gpu.md). Inductor fuses
those steps.

What is compiled is each decoder layer's parts that take one tensor (the MLP and the
norms: :func:`compilable_parts`), not the layer itself: the update's shared-prompt
forward hands the layers a KV cache, and a compiled layer would be specialised to the
cache's length and the layer's index (a graph per layer). Each part's forward is
compiled with dynamic shapes, so a batch of another length or size does not compile
again, and the layers' parts of one class share one compiled graph: they run the
same code and their weights are its inputs.

Only the update's forwards run compiled (:meth:`CompiledLayers.active`, around the
training forward): rollouts, scoring and the KL reference keep the eager modules.
The first minibatch through compiled parts is the test: if its forward or backward
fails (compilation is lazy, so the backward's fails in ``backward()``), the update
runs eagerly from then on and the reason is logged once
(:meth:`CompiledLayers.give_up`). FSDP's sharded layers are not compiled (their hooks
would be traced too); they run eagerly with the reason logged.

With several processes (DDP) a failure on one rank only must not send it back into
collectives the others have left (the first minibatch's gradient all-reduce starts
during its backward): before that minibatch every rank runs each part class's
compiled forward and backward once on its own, outside any collective
(:meth:`CompiledLayers.agree`), and one gather decides for all: compiled everywhere,
or eager everywhere with the reason logged. A failure after that is raised, not
retried eagerly on one rank.
"""

from __future__ import annotations

import inspect
import logging
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

log = logging.getLogger(__name__)

_BUILT: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The model's repeated blocks: of its module lists whose entries are all one
    class, the one holding the most parameters (transformers' ``model.layers``,
    GPT-2's ``transformer.h``). Empty when it has none."""
    best: list[nn.Module] = []
    best_size = 0
    for mod in model.modules():
        if not isinstance(mod, nn.ModuleList) or not len(mod):
            continue
        if len({type(m) for m in mod}) != 1:
            continue
        size = sum(p.numel() for p in mod.parameters())
        if size > best_size:
            best, best_size = list(mod), size
    return best


def compilable_parts(layer: nn.Module) -> list[nn.Module]:
    """A decoder layer's children whose forward takes one tensor (a Llama layer's
    MLP and two norms; not its attention, which takes the cache and the mask)."""
    parts = []
    for child in layer.children():
        try:
            params = inspect.signature(child.forward).parameters.values()
        except (TypeError, ValueError):
            continue
        required = [
            p
            for p in params
            if p.default is p.empty
            and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
        if len(required) == 1 and all(p.kind != p.VAR_KEYWORD for p in params):
            parts.append(child)
    return parts


class CompiledLayers:
    """The compilable parts of a model's decoder layers, each with a compiled
    forward that :meth:`active` puts in place of its own."""

    def __init__(self, layers: list[nn.Module]) -> None:
        self.parts = [part for layer in layers for part in compilable_parts(layer)]
        self.compiled = [torch.compile(m.forward, dynamic=True) for m in self.parts]
        self.proven = False  # a minibatch ran through them, forward and backward
        self.agreed = False  # the ranks agreed they compile (several processes)
        self.failed: str | None = None  # why the update runs eagerly now

    @property
    def on(self) -> bool:
        return self.failed is None

    @contextmanager
    def active(self) -> Iterator[None]:
        """The layers' compiled forwards in place (when on), their own after."""
        if not self.on:
            yield
            return
        for part, fn in zip(self.parts, self.compiled, strict=True):
            part.forward = fn  # an instance attribute: nn.Module's call finds it
        try:
            yield
        finally:
            for part in self.parts:
                vars(part).pop("forward", None)

    def agree(self, par: Any, model: nn.Module) -> None:
        """Several processes: each part class's compiled forward and backward run
        here on random inputs (:meth:`_probe`), no collective involved; then one
        gather of every rank's outcome: if any failed, every rank runs the update
        eagerly (the first failure's reason logged). Once per run."""
        if self.agreed or not self.on or par.world == 1:
            return
        error = ""
        try:
            self._probe(model)
        except Exception as exc:  # noqa: BLE001 (compilation fails in many ways)
            error = repr(exc)
        failed = par.all_gather_objects(error)
        self.agreed = True
        bad = [(rank, e) for rank, e in enumerate(failed) if e]
        if bad:
            rank, reason = bad[0]
            self.failed = (
                f"the update's compiled layers failed on rank {rank}, every rank "
                f"runs eagerly: {reason}"
            )
            log.warning("%s", self.failed)

    def _probe(self, model: nn.Module) -> None:
        """Each part class's compiled forward on (2, 3, width) inputs with a
        backward, on (1, 3, width) (a blank part's single row: its own graph) and
        without gradients (the top-entropy pool's forward); from a generator of
        its own (the run's random streams untouched), the probe's gradients
        dropped."""
        params = [p for p in model.parameters() if p.is_floating_point()]
        fallback = params[0] if params else torch.empty(0)
        generator: dict[torch.device, torch.Generator] = {}
        seen: set[type] = set()
        for part, fn in zip(self.parts, self.compiled, strict=True):
            if type(part) in seen:
                continue
            seen.add(type(part))
            own = [p for p in part.parameters() if p.is_floating_point()]
            like = own[0] if own else fallback
            width = input_width(part, model)
            gen = generator.setdefault(
                like.device, torch.Generator(like.device).manual_seed(0)
            )
            for rows, grad in ((2, True), (1, True), (2, False)):
                x = torch.randn(
                    (rows, 3, width),
                    dtype=like.dtype,
                    device=like.device,
                    generator=gen,
                )
                with torch.set_grad_enabled(grad):
                    out = fn(x.requires_grad_(grad))
                    out = out[0] if isinstance(out, tuple) else out
                    if grad and out.requires_grad:
                        out.float().sum().backward()
            for p in part.parameters():
                p.grad = None  # the probe's gradients are not the update's

    def give_up(self, exc: BaseException) -> bool:
        """After a failure in a minibatch through these layers: True (the caller
        runs the minibatch again eagerly) if none had succeeded yet, so the failure
        is compilation's, and no other rank could be in a collective it left
        (one process); False (the caller re-raises) otherwise."""
        if self.proven or not self.on or self.agreed:
            return False
        self.failed = f"the update's compiled layers failed, running eagerly: {exc!r}"
        log.warning("%s", self.failed)
        return True


def input_width(part: nn.Module, model: nn.Module) -> int:
    """The width of what ``part`` takes: its first linear layer's input features,
    else its first one-dimensional weight's size (a norm's), else the model's
    hidden size (its text model's, for a composite config)."""
    for mod in part.modules():
        if isinstance(mod, nn.Linear):
            return mod.in_features
        weight = getattr(mod, "weight", None)
        if isinstance(weight, torch.Tensor) and weight.dim() == 1:
            return weight.shape[0]
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(text.hidden_size)


def compiled_layers(model: nn.Module, strategy: str) -> CompiledLayers | None:
    """The compiled layers of ``model`` for the update (built once per model), or
    None where they cannot be used (the reason logged once per model)."""
    built = _BUILT.get(model)
    if built is None:
        layers = decoder_layers(model)
        if strategy == "fsdp":
            built = "optim.compile: FSDP's sharded layers run eagerly"
        elif not any(compilable_parts(layer) for layer in layers):
            built = "optim.compile: the model has no layer parts to compile"
        else:
            built = CompiledLayers(layers)
        if isinstance(built, str):
            log.warning("%s", built)
        _BUILT[model] = built
    return built if isinstance(built, CompiledLayers) else None
