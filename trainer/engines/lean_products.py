"""The lean forward's projections (:mod:`trainer.engines.lean`): a group of
``nn.Linear`` modules as one product over their concatenated weights, through
oneDNN from a packed copy of the weight where that is faster (on the CPU, float32,
big enough), else ``F.linear``; modules that are not plain (LoRA's) are called.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# On the CPU, a projection of at least PACK_MIN weights multiplies through oneDNN
# from a packed copy of its weight: 1.5-3.5x faster than F.linear at a decode
# step's 1-32 rows (256-2048 x 256 weights; 2-core AMD EPYC, MKL); a row's result
# did not depend on how many rows shared the product (2048 x 256, 1-64 rows; MKL's
# did below 4 rows), though nothing here relies on that. Below ~2**17 weights
# oneDNN's ~15 us a call costs more than it saves. PACK_ROWS: the rows the packing
# is laid out for (any count works).
PACK = True
PACK_MIN = 2**17
PACK_ROWS = 64


def fused(mods: tuple[nn.Module, ...], concatenate: bool = True, pack: bool = False):
    """The modules' weights (and biases) concatenated, as one :class:`Product`,
    or None: each is called, because one of them is not a plain ``nn.Linear``
    (LoRA's wraps it) or the weights are not to be held twice (``concatenate``
    False)."""
    if any(type(m) is not nn.Linear for m in mods):
        return None
    if len(mods) == 1:
        return Product(mods[0].weight, mods[0].bias, pack)
    if not concatenate:
        return None
    weight = torch.cat([m.weight for m in mods])
    if all(m.bias is None for m in mods):
        return Product(weight, None, pack)
    bias = [
        m.bias if m.bias is not None else m.weight.new_zeros(m.out_features)
        for m in mods
    ]
    return Product(weight, torch.cat(bias), pack)


def can_pack(weight: torch.Tensor) -> bool:
    """Whether oneDNN can take ``weight``'s products from a packed copy: a float32
    weight on the CPU of a build with oneDNN, not turned off
    (``torch.backends.mkldnn.flags(enabled=False)``)."""
    return (
        PACK
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and torch.backends.mkldnn.is_available()
        and torch.backends.mkldnn.enabled
        and hasattr(torch.ops.mkldnn, "_linear_pointwise")
    )


class Product:
    """``x @ weight.T + bias``: through oneDNN from a packed copy of the weight
    (``pack``), else ``F.linear`` over the weight itself."""

    def __init__(self, weight: torch.Tensor, bias, pack: bool) -> None:
        self.bias = None if bias is None else bias.detach()
        self.weight = weight.detach()
        # can_pack again: a model moved to another device or dtype since.
        self.packed = pack and weight.numel() >= PACK_MIN and can_pack(weight)
        if self.packed:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(
                self.weight, PACK_ROWS
            )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.packed:
            return torch.ops.mkldnn._linear_pointwise(
                x, self.weight, self.bias, "none", [], ""
            )
        return F.linear(x, self.weight, self.bias)


def project(x: torch.Tensor, product, mods) -> list[torch.Tensor]:
    if product is None:
        return [m(x) for m in mods]
    if len(mods) == 1:
        return [product(x)]
    return list(product(x).split([m.out_features for m in mods], dim=-1))
