"""``optim.master_weights`` through the real loop: a bfloat16 model at a fine-tuning
learning rate keeps every update in float32 copies (checkpointed, resumed) and
rounds them into its weights; without them the updates are rounded away."""

from __future__ import annotations

import torch
from option_registry import covers
from wiring import Ran, initial_policy, run, stopped_and_resumed, tiny

LR = 1e-5  # a tenth of a bf16 step of a 0.02 weight (1.2e-4)


def _bf16(**optim):
    return tiny(
        steps=2,
        model={"device": "cpu", "dtype": "bfloat16"},
        optim={"lr": LR, **optim},
        checkpoint={"every": 1},
    )


def _per_param(ran: Ran) -> list[tuple[str, torch.Tensor, torch.Tensor, dict]]:
    """(name, weights before, weights after, optimizer state) per trained weight."""
    before = initial_policy(ran.config)
    after, state = ran.weights(), ran.optimizer_state()
    named = [(n, p) for n, p in before.named_parameters() if p.requires_grad]
    return [
        (name, p.detach(), after[name], state[i])
        for i, (name, p) in enumerate(named)
        if name in after and i in state
    ]


def _share(x: torch.Tensor) -> float:
    return float(x.float().mean())


@covers("optim.master_weights")
def test_a_bfloat16_model_keeps_its_small_updates_in_float32_copies(tmp_path):
    on = _per_param(run(_bf16(), tmp_path))
    off = _per_param(run(_bf16(master_weights=False), tmp_path))
    assert on and len(on) == len(off)
    for name, before, after, st in on:
        assert before.dtype == after.dtype == torch.bfloat16, name
        master = st["master"]
        assert master.dtype == st["exp_avg"].dtype == torch.float32, name
        assert torch.equal(after, master.bfloat16()), name  # rounded from the copy
        # Two AdamW steps of at most about lr each (their signs may differ): every
        # copy moved, by lr / 4 or more on average.
        moved = (master - before.float()).abs()
        assert _share(moved > 0) > 0.99 and _share(moved) > LR / 4, name
        assert float(moved.max()) < 2.5 * LR, name
    for name, _, _, st in off:
        assert "master" not in st and st["exp_avg"].dtype == torch.bfloat16, name
    # Without the copies, most weights of each matrix never moved: what the
    # float32 copies hold is the run's learning, rounded away here.
    matrices = [(b, a) for _, b, a, _ in off if b.dim() == 2]
    assert matrices and all(_share(a != b) < 0.5 for b, a in matrices)


def test_a_resumed_bfloat16_run_goes_on_from_its_float32_copies(tmp_path):
    cfg = _bf16()
    whole = run(cfg, tmp_path)
    again = stopped_and_resumed(cfg, tmp_path / "stopped", stop_after=1)
    for (name, _, a, st), (_, _, b, st2) in zip(
        _per_param(whole), _per_param(again), strict=True
    ):
        assert torch.equal(a, b), name
        assert torch.equal(st["master"], st2["master"]), name
