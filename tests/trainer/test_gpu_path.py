"""What the GPU path is built from, checked without a GPU: the model sizes, SDPA
attention, and the MFU arithmetic of ``bench/gpu_bench.py``."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from bench.gpu_bench import mfu, peak_tflops
from trainer.config import ModelConfig
from trainer.models import MODEL_SIZES, build_model


@pytest.mark.parametrize(
    "size, low, high", [("large", 80e6, 130e6), ("0.5b", 0.45e9, 0.55e9)]
)
def test_the_gpu_sizes_have_the_parameters_they_promise(size, low, high):
    hidden, layers, heads, inter = MODEL_SIZES[size]
    model, tok = build_model(ModelConfig(size="tiny"), ["a", "b"])
    config = model.config
    config.update(
        {
            "hidden_size": hidden,
            "num_hidden_layers": layers,
            "num_attention_heads": heads,
            "num_key_value_heads": heads,
            "intermediate_size": inter,
            "vocab_size": 32_000,  # a real tokenizer's order of magnitude
        }
    )
    with torch.device("meta"):  # counted, never allocated
        n = sum(p.numel() for p in LlamaForCausalLM(config).parameters())
    assert low < n < high, n


def test_the_default_model_uses_pytorch_sdpa_attention():
    model, _ = build_model(ModelConfig(size="tiny"), ["a", "b"])
    assert model.config._attn_implementation == "sdpa"


def test_every_size_is_a_config_choice():
    choices = ModelConfig.model_fields["size"].annotation.__args__
    assert set(choices) == set(MODEL_SIZES)


def test_mfu_is_six_flops_per_parameter_per_token_over_the_peak():
    assert peak_tflops("NVIDIA H200") == 989.0 and peak_tflops("mystery") is None
    # 0.5B params at 131,867 tokens/s is 6 * 0.5e9 * 131867 = 395.6 TFLOP/s: 40%.
    assert mfu(500_000_000, 131_867, 989.0) == pytest.approx(0.4, abs=1e-4)
