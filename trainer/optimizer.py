"""AdamW for weights held in bfloat16: float32 master copies (``optim.master_weights``).

A model in bfloat16 (``model.dtype``; the default on CUDA) carries 8 significant
bits: a weight of 0.02 moves in steps of 1.2e-4. AdamW's update is about the learning
rate, 1e-6 to 1e-5 when fine-tuning a pretrained model, so stepping the bfloat16
weights themselves rounds nearly every update away (lr 1e-6, 10 steps: 98% of such
weights never change). :class:`MasterAdamW` keeps a float32 copy of each
low-precision parameter in its state, with float32 moments, steps the copies with
PyTorch's own AdamW arithmetic and rounds them into the model's weights after each
step (the mixed-precision optimizer Megatron and DeepSpeed use). The forward and
backward stay in bfloat16; parameters already in float32 (LoRA adapters peft keeps
in float32, a value head) are stepped in place as ``torch.optim.AdamW`` does.

The copies live in ``state`` beside the moments (``"master"``), so checkpoints keep
them in float32 (a resumed run goes on from the unrounded weights) and FSDP's
sharded state dicts shard them as they shard the moments. A checkpoint written
without them (an AdamW over the same parameters, ``optim.master_weights`` off) loads:
its moments are taken to float32 and the copies are made from the weights at the
first step. Weights written by anything but this optimizer after its first step
would be overwritten by its copies at the next: the trainer writes them only before
(warm start, a resume's checkpoint, ``model.init_from_run``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.optim.adam import adam

LOW_PRECISION = (torch.bfloat16, torch.float16)
# The float32 gradients made for one call of AdamW's arithmetic: at most this many
# elements at a time (a parameter larger than it goes alone), so a large model's
# whole gradient is never held twice.
BUCKET_ELEMENTS = 1 << 26  # trainer.budget.OPTIMIZER_BUCKET counts it
_FLOAT_STATE = ("master", "exp_avg", "exp_avg_sq", "max_exp_avg_sq")


def low_precision(p: torch.Tensor) -> bool:
    return p.dtype in LOW_PRECISION


class MasterAdamW(torch.optim.AdamW):
    """``torch.optim.AdamW`` whose low-precision parameters are stepped as float32
    copies kept in its state (see the module's docstring); the same arguments."""

    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for bucket in _buckets(p for p in group["params"] if p.grad is not None):
                self._step_bucket(group, bucket)
        return loss

    def _step_bucket(self, group: dict[str, Any], bucket: list[torch.Tensor]) -> None:
        targets, grads, avgs, sqs, maxes, steps = [], [], [], [], [], []
        rounded: list[tuple[torch.Tensor, torch.Tensor]] = []
        for p in bucket:
            if p.grad.is_sparse:
                raise RuntimeError("MasterAdamW does not take sparse gradients")
            state = self.state[p]
            if low_precision(p):
                master = state.get("master")
                if master is None:  # the first step, or a checkpoint without copies
                    master = state["master"] = p.detach().to(torch.float32, copy=True)
                rounded.append((p, master))
                targets.append(master)
                grads.append(p.grad.to(torch.float32))
            else:
                targets.append(p)
                grads.append(p.grad)
            _init_state(state, targets[-1], group)
            avgs.append(state["exp_avg"])
            sqs.append(state["exp_avg_sq"])
            if group["amsgrad"]:
                maxes.append(state["max_exp_avg_sq"])
            steps.append(state["step"])
        adam(
            targets,
            grads,
            avgs,
            sqs,
            maxes,
            steps,
            foreach=group["foreach"],
            capturable=group["capturable"],
            differentiable=group["differentiable"],
            fused=group["fused"],
            has_complex=False,
            decoupled_weight_decay=True,
            amsgrad=group["amsgrad"],
            beta1=group["betas"][0],
            beta2=group["betas"][1],
            lr=group["lr"],
            weight_decay=group["weight_decay"],
            eps=group["eps"],
            maximize=group["maximize"],
        )
        for p, master in rounded:
            p.copy_(master)  # round to nearest, once, from the float32 value

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """As AdamW's, but the low-precision parameters' copies and moments stay
        float32 (``Optimizer.load_state_dict`` casts every floating state tensor to
        its parameter's dtype)."""
        saved = state_dict["state"]
        super().load_state_dict(state_dict)
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(ids, params, strict=True):
            if i not in saved or not low_precision(p):
                continue
            state = self.state[p]
            for key in _FLOAT_STATE:
                value = saved[i].get(key)
                if isinstance(value, torch.Tensor):
                    state[key] = value.to(device=p.device, dtype=torch.float32)


def _init_state(state: dict[str, Any], target: torch.Tensor, group: dict) -> None:
    """AdamW's lazy state for ``target`` (the float32 copy or the parameter), or
    moments a checkpoint without copies held in bfloat16 taken to float32."""
    if "step" not in state:
        on_device = group["capturable"] or group["fused"]
        state["step"] = torch.zeros(
            (), dtype=torch.float32, device=target.device if on_device else "cpu"
        )
    keys = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if group["amsgrad"] else ())
    for key in keys:
        value = state.get(key)
        if value is None:
            state[key] = torch.zeros_like(target, memory_format=torch.preserve_format)
        elif value.dtype != target.dtype:
            state[key] = value.to(target.dtype)


def _buckets(params: Iterable[torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Parameters in runs of at most ``BUCKET_ELEMENTS`` elements (a larger one
    alone), in order."""
    bucket: list[torch.Tensor] = []
    size = 0
    for p in params:
        if bucket and size + p.numel() > BUCKET_ELEMENTS:
            yield bucket
            bucket, size = [], 0
        bucket.append(p)
        size += p.numel()
    if bucket:
        yield bucket


def build_optimizer(
    params: Iterable[torch.Tensor], *, master_weights: bool, **kwargs: Any
) -> torch.optim.Optimizer:
    """AdamW over ``params`` (its keyword arguments): :class:`MasterAdamW` when
    ``master_weights`` and any of them is low-precision, else ``torch.optim.AdamW``."""
    params = list(params)
    cls = (
        MasterAdamW
        if master_weights and any(low_precision(p) for p in params)
        else torch.optim.AdamW
    )
    return cls(params, **kwargs)
