"""A small Hugging Face chat model directory, built inside the test (no download).

A byte-level BPE tokenizer trained by ``tokenizers`` on a small corpus, a ChatML-style
chat template with system, user, assistant and tool roles, and a tiny Llama model
with random weights, saved with ``save_pretrained``. As in Qwen's and most chat
tokenizers, the tool tags ``<tool_call>``/``</tool_call>`` are special tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import (
    GenerationConfig,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% endif %}"
)
CORPUS = [
    "tom has 7 apples and gets 5 more . how many apples ?",
    'You can call tools by writing <tool_call>{"name": "calculator", '
    '"arguments": {"expression": "7 + 5"}}</tool_call>',
    "The answer is 12. The calculator says 12.",
    "system user assistant tool error: unknown tool",
    "0 1 2 3 4 5 6 7 8 9 + - * / ( ) { } [ ] : , . ? !",
] * 4


def build_chat_model(root: Path, *, seed: int = 0, kv_heads: int = 4) -> Path:
    """Write the model directory under ``root`` and return its path."""
    path = Path(root) / "tiny-chat"
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=420,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(CORPUS, trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|endoftext|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIALS[1:],
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,  # < 4: grouped-query attention
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.eos_token_id],
        pad_token_id=tok.pad_token_id,
    )
    model.save_pretrained(path)
    return path
