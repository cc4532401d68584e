"""MasterAdamW: bfloat16 weights stepped as float32 copies (``trainer.optimizer``)."""

from __future__ import annotations

import pytest
import torch

import trainer.optimizer as optimizer
from trainer.optimizer import MasterAdamW, build_optimizer

KW = {"lr": 1e-3, "betas": (0.8, 0.95), "weight_decay": 0.1, "eps": 1e-8}


def _grads(shapes, steps, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [[torch.randn(s, generator=gen) for s in shapes] for _ in range(steps)]


def _weights(shapes, dtype, seed=1):
    gen = torch.Generator().manual_seed(seed)
    return [
        (torch.randn(s, generator=gen) * 0.02).to(dtype).requires_grad_()
        for s in shapes
    ]


def _train(opt_cls, params, grads, **kw):
    opt = opt_cls(params, **{**KW, **kw})
    for step in grads:
        for p, g in zip(params, step, strict=True):
            p.grad = g.to(p.dtype)
        opt.step()
        opt.zero_grad(set_to_none=True)
    return opt


SHAPES = [(64, 32), (32,), (7, 5, 3)]


@pytest.mark.parametrize("amsgrad", [False, True])
def test_float32_weights_are_stepped_exactly_as_adamw_steps_them(amsgrad):
    grads = _grads(SHAPES, 5)
    ours, theirs = _weights(SHAPES, torch.float32), _weights(SHAPES, torch.float32)
    a = _train(MasterAdamW, ours, grads, amsgrad=amsgrad)
    _train(torch.optim.AdamW, theirs, grads, amsgrad=amsgrad)
    for x, y in zip(ours, theirs, strict=True):
        assert torch.equal(x, y)
    assert all("master" not in st for st in a.state.values())


def test_bfloat16_weights_follow_a_float32_adamw_fed_the_same_gradients():
    grads = _grads(SHAPES, 6)
    low = _weights(SHAPES, torch.bfloat16)
    ref = [p.detach().float().requires_grad_() for p in low]
    opt = _train(MasterAdamW, low, grads)
    # The reference sees the gradients as the bf16 model computes them (rounded).
    _train(torch.optim.AdamW, ref, [[g.bfloat16().float() for g in s] for s in grads])
    for p, r in zip(low, ref, strict=True):
        st = opt.state[p]
        assert st["master"].dtype == st["exp_avg"].dtype == torch.float32
        assert torch.equal(st["master"], r.detach())
        assert torch.equal(p.detach(), r.detach().bfloat16())  # rounded once


def test_small_updates_reach_bfloat16_weights_that_plain_adamw_rounds_away():
    # lr 1e-6 on weights of ~0.02 (a bf16 step of 1.2e-4): the float32 run moves
    # every weight by ~1e-5 in 10 steps.
    shapes = [(256, 256)]
    grads = _grads(shapes, 10)
    start = _weights(shapes, torch.bfloat16)[0].detach().clone()
    plain = _weights(shapes, torch.bfloat16)
    master = _weights(shapes, torch.bfloat16)
    exact = [start.float().requires_grad_()]
    _train(torch.optim.AdamW, plain, grads, lr=1e-6, weight_decay=0.0)
    opt = _train(MasterAdamW, master, grads, lr=1e-6, weight_decay=0.0)
    _train(torch.optim.AdamW, exact, grads, lr=1e-6, weight_decay=0.0)
    want = exact[0].detach() - start.float()
    moved_plain = (plain[0].detach() != start).float().mean()
    got = opt.state[master[0]]["master"] - start.float()
    assert moved_plain < 0.05  # what the bf16 weights alone keep of it
    torch.testing.assert_close(got, want, rtol=0, atol=1e-7)
    # The model's weights are the copies rounded: some cross a bf16 step already.
    assert torch.equal(master[0].detach(), opt.state[master[0]]["master"].bfloat16())
    assert (master[0].detach() != start).float().mean() > moved_plain


def test_the_copies_and_moments_survive_a_state_dict_in_float32():
    grads = _grads(SHAPES, 6)
    whole = _weights(SHAPES, torch.bfloat16)
    _train(MasterAdamW, whole, grads)
    half = _weights(SHAPES, torch.bfloat16)
    first = _train(MasterAdamW, half, grads[:3])
    saved = first.state_dict()
    resumed_params = [p.detach().clone().requires_grad_() for p in half]
    resumed = MasterAdamW(resumed_params, **KW)
    resumed.load_state_dict(saved)
    for p in resumed_params:
        assert resumed.state[p]["master"].dtype == torch.float32
        assert resumed.state[p]["exp_avg_sq"].dtype == torch.float32
    for step in grads[3:]:
        for p, g in zip(resumed_params, step, strict=True):
            p.grad = g.bfloat16()
        resumed.step()
    for p, q in zip(whole, resumed_params, strict=True):
        assert torch.equal(p, q)


def test_a_plain_adamw_state_loads_and_its_moments_are_taken_to_float32():
    grads = _grads(SHAPES, 4)
    params = _weights(SHAPES, torch.bfloat16)
    plain = _train(torch.optim.AdamW, params, grads[:2])
    opt = MasterAdamW(params, **KW)
    opt.load_state_dict(plain.state_dict())
    for step in grads[2:]:
        for p, g in zip(params, step, strict=True):
            p.grad = g.bfloat16()
        opt.step()
    for p in params:
        st = opt.state[p]
        assert float(st["step"]) == 4.0
        assert st["exp_avg"].dtype == st["master"].dtype == torch.float32
        assert torch.equal(p.detach(), st["master"].bfloat16())


def test_buckets_change_nothing_but_how_many_gradients_are_held_at_once(monkeypatch):
    grads = _grads(SHAPES, 3)
    whole = _weights(SHAPES, torch.bfloat16)
    _train(MasterAdamW, whole, grads)
    monkeypatch.setattr(
        optimizer, "BUCKET_ELEMENTS", 140
    )  # (64, 32) alone, the rest together
    assert [len(b) for b in optimizer._buckets(whole)] == [1, 2]
    bucketed = _weights(SHAPES, torch.bfloat16)
    _train(MasterAdamW, bucketed, grads)
    for p, q in zip(whole, bucketed, strict=True):
        assert torch.equal(p, q)


def test_a_mix_of_float32_and_bfloat16_weights_each_stepped_its_way():
    # LoRA adapters peft keeps in float32 beside a bf16 value head, say.
    grads = _grads(SHAPES[:2], 3)
    mixed = [
        _weights(SHAPES[:1], torch.float32)[0],
        _weights(SHAPES[1:2], torch.bfloat16)[0],
    ]
    opt = _train(MasterAdamW, mixed, grads)
    assert "master" not in opt.state[mixed[0]]
    assert opt.state[mixed[0]]["exp_avg"].dtype == torch.float32
    assert opt.state[mixed[1]]["master"].dtype == torch.float32


def test_build_optimizer_picks_the_master_copies_only_where_they_matter():
    low, full = _weights(SHAPES, torch.bfloat16), _weights(SHAPES, torch.float32)
    assert type(build_optimizer(low, master_weights=True, lr=1e-3)) is MasterAdamW
    assert (
        type(build_optimizer(low, master_weights=False, lr=1e-3)) is torch.optim.AdamW
    )
    assert (
        type(build_optimizer(full, master_weights=True, lr=1e-3)) is torch.optim.AdamW
    )


def _sharded_rank(rank: int, port: int, out: str) -> None:
    """Two gloo ranks: an FSDP2-sharded bf16 model stepped by MasterAdamW, its
    state through DCP's state dicts and back, then one more step."""
    import torch.distributed as dist
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )
    model = _sharded_model()
    for layer in model:
        fully_shard(layer)
    fully_shard(model)
    opt = MasterAdamW(model.parameters(), **KW)
    for x in _inputs()[:3]:
        _sharded_step(model, opt, x)
    msd, osd = get_state_dict(model, opt)
    kinds = {
        k: (type(v).__name__, v.dtype) for k, v in osd["state"]["0.weight"].items()
    }
    set_state_dict(model, opt, model_state_dict=msd, optim_state_dict=osd)
    loaded = {st["master"].dtype for st in opt.state.values()}
    _sharded_step(model, opt, _inputs()[3])
    whole = {k: v.full_tensor() for k, v in model.state_dict().items()}
    if rank == 0:
        torch.save(
            {"kinds": kinds, "loaded": loaded, "weights": whole}, f"{out}/rank0.pt"
        )
    dist.destroy_process_group()


def _two_ranks(fn, tmp_path) -> dict:
    """``fn(rank, port, folder)`` on two gloo processes; what rank 0 saved in
    ``folder/rank0.pt``. Skipped without FSDP2."""
    import socket

    import torch.multiprocessing as mp

    from trainer.fsdp import available

    if not available():
        pytest.skip("torch.distributed.fsdp.fully_shard is missing")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(fn, args=(port, str(tmp_path)), nprocs=2, join=True)
    return torch.load(tmp_path / "rank0.pt", weights_only=False)


def _sharded_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4)).to(
        torch.bfloat16
    )


def _inputs() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.randn(8, 16, generator=gen).bfloat16() for _ in range(4)]


def _sharded_step(model, opt, x) -> None:
    model(x).float().square().mean().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


@pytest.mark.slow
def test_fsdp_shards_the_copies_and_they_step_as_the_whole_model_s(tmp_path):
    got = _two_ranks(_sharded_rank, tmp_path)
    assert got["kinds"]["master"] == ("DTensor", torch.float32)
    assert got["kinds"]["exp_avg"] == ("DTensor", torch.float32)
    assert got["loaded"] == {torch.float32}  # not cast to the weights' bf16 on load
    model = _sharded_model()
    opt = MasterAdamW(model.parameters(), **KW)
    for x in _inputs():
        _sharded_step(model, opt, x)
    for name, value in model.state_dict().items():
        torch.testing.assert_close(got["weights"][name], value, rtol=0, atol=0.01)


def _old_checkpoint_rank(rank: int, port: int, out: str) -> None:
    """Two gloo ranks: a sharded bf16 model saved by plain AdamW (no float32
    copies), restored into MasterAdamW as a resumed run restores it."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    from trainer.dist_checkpoint import restore

    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2
    )

    def sharded():
        model = _sharded_model()
        for layer in model:
            fully_shard(layer)
        fully_shard(model)
        return model

    old = sharded()
    plain = torch.optim.AdamW(old.parameters(), **KW)
    for x in _inputs()[:2]:
        _sharded_step(old, plain, x)
    msd, osd = get_state_dict(old, plain)
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=f"{out}/dcp")
    saved = {k: v.full_tensor() for k, v in old.state_dict().items()}
    new = sharded()
    opt = MasterAdamW(new.parameters(), **KW)
    restore(new, opt, f"{out}/dcp")  # DCP refused the missing copies before
    loaded = {k: v.full_tensor() for k, v in new.state_dict().items()}
    copies = sorted({"master" in st for st in opt.state.values()})
    _sharded_step(new, opt, _inputs()[2])
    first = next(new.parameters())
    rounded = torch.equal(
        first.to_local(), opt.state[first]["master"].to_local().bfloat16()
    )
    if rank == 0:
        torch.save(
            {"saved": saved, "loaded": loaded, "copies": copies, "rounded": rounded},
            f"{out}/rank0.pt",
        )
    dist.destroy_process_group()


@pytest.mark.slow
def test_a_sharded_checkpoint_without_copies_resumes_from_its_weights(tmp_path):
    got = _two_ranks(_old_checkpoint_rank, tmp_path)
    for name, value in got["saved"].items():
        assert torch.equal(got["loaded"][name], value), name
    # The copies made before the load are gone: the next step makes them from the
    # loaded weights, and rounds them back into the model.
    assert got["copies"] == [False] and got["rounded"]
