"""Generation batches shared by the engine tests (``test_engines``,
``test_compiled_engine``): ragged contexts and budgets from a seed."""

from __future__ import annotations

import random


def ragged_batch(policy, seed: int, shared: bool, rows: tuple[int, int] = (2, 10)):
    """Ragged contexts (or one shared by every row) and budgets spread over 0..40;
    the number of rows drawn from ``range(*rows)``."""
    rng = random.Random(seed)
    vocab = len(policy.tokenizer)
    B = rng.randrange(*rows)
    contexts = [
        [policy.bos_id or 0]
        + [rng.randrange(4, vocab) for _ in range(rng.randrange(12))]
        for _ in range(B)
    ]
    if shared:
        contexts = [contexts[0]] * B
    budgets = [rng.randrange(0, 41) for _ in range(B)]
    budgets[0] = max(budgets[0], 5)
    return contexts, budgets
