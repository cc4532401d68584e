"""The reference engine: the plain KV-cache loop the eager engine replaced.

Every row stays in the batch until the last one stops (finished rows are padded),
each sampled token is read back to the host row by row, and the sampler draws
with ``torch.multinomial`` on the host. Kept, unchanged, as the yardstick: the
eager engine must give its tokens and log-probs row by row for a fixed seed
(``tests/trainer/test_engines.py``), and ``bench/rollout_bench.py`` times the two.
"""

from __future__ import annotations

import torch

from trainer.engines.base import ENGINES, Generation, RolloutEngine
from trainer.engines.prefill import prefill
from trainer.stopping import Stopped


@ENGINES.register("reference")
class ReferenceEngine(RolloutEngine):
    """Today's loop before issue 24: simple, exact, slow on ragged lengths."""

    @torch.no_grad()
    def generate(
        self,
        contexts: list[list[int]],
        budgets: list[int],
        *,
        temperature: float,
        top_p: float,
        generator: torch.Generator | None,
        with_logprobs: bool,
    ) -> Generation:
        policy = self.policy
        dev = policy.device
        out, logits, mask, positions = prefill(policy, contexts)
        next_pos = positions[:, -1:] + 1
        produced: list[list[int]] = [[] for _ in contexts]
        lps: list[list[float]] = [[] for _ in contexts]
        done = torch.tensor([b <= 0 for b in budgets], device=dev)
        limit = torch.tensor(budgets, device=dev)
        stop = torch.tensor(policy.stop_ids, device=dev)
        for t in range(max(budgets)):
            if policy.stop_check is not None and policy.stop_check():
                raise Stopped("asked to stop during generation")
            tok = sample(logits, temperature, top_p, generator)
            tok = torch.where(done, torch.full_like(tok, policy.pad_id), tok)
            live = (~done).nonzero().flatten().tolist()
            for i in live:
                produced[i].append(int(tok[i]))
            if with_logprobs:
                step_lp = token_logprobs(logits, tok, policy.temperature).tolist()
                for i in live:
                    lps[i].append(step_lp[i])
            done = done | torch.isin(tok, stop) | (limit <= t + 1)
            if bool(done.all()):
                break
            mask = torch.cat([mask, (~done).long().unsqueeze(1)], dim=1)
            out = policy.model(
                input_ids=tok.unsqueeze(1),
                attention_mask=mask,
                position_ids=next_pos,
                cache=out.cache,
                use_cache=True,
            )
            logits = out.logits[:, -1, :]
            next_pos = next_pos + 1
        return Generation(produced, lps)


def sample(
    logits: torch.Tensor, temperature: float, top_p: float, gen: torch.Generator | None
) -> torch.Tensor:
    """One token per row from softmax(logits / temperature), nucleus-filtered;
    temperature 0: the most likely token (greedy decoding, for evaluation)."""
    if temperature <= 0:
        return logits.argmax(-1)
    probs = sampling_probs(logits, temperature, top_p)
    # Sampling on the CPU with an explicit generator keeps runs reproducible (and
    # resumable bit for bit) whatever device the model is on.
    return (
        torch.multinomial(probs.cpu(), 1, generator=gen).squeeze(-1).to(logits.device)
    )


def sampling_probs(logits: torch.Tensor, temperature: float, top_p: float):
    """softmax(logits / temperature) (B, V) in float32, nucleus-filtered at top_p."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_p, order = probs.sort(dim=-1, descending=True)
        keep = sorted_p.cumsum(-1) - sorted_p < top_p
        sorted_p = sorted_p * keep
        probs = torch.zeros_like(probs).scatter(-1, order, sorted_p)
    return probs


def token_logprobs(
    logits: torch.Tensor, tok: torch.Tensor, temperature: float
) -> torch.Tensor:
    """(B,) log-probs of the sampled tokens under softmax(logits / temperature):
    scored at the policy's temperature, as the learner scores them."""
    lf = logits.float() / temperature
    chosen = lf.gather(-1, tok.unsqueeze(-1)).squeeze(-1)
    return chosen - torch.logsumexp(lf, -1)
