"""How turns become tokens: the word grammar of the built-in models, or a chat template.

A renderer is chosen once, from the tokenizer, when the policy is built:

* :class:`WordRenderer` (the project's word-level tokenizer, or any model directory
  without a chat template): ``<bos> prompt``, the action ends with ``<eoa>``, an
  observation is ``<obs> text``.
* :class:`ChatRenderer` (a tokenizer with a chat template): the prompt is the template's
  rendering of the task's messages (system, user...) with the generation prompt; the
  action is an assistant turn that ends at the template's end-of-turn token (or EOS);
  an observation is the rest of that turn plus a ``tool`` message and the next
  generation prompt, as the template writes them.

The renderer knows tokens and text; it knows nothing of environments' rules or rewards
(tool calls are parsed by the environment, :mod:`trainer.envs.tools`, from the action's
text with the model's special tokens kept: :func:`action_text`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from trainer.tokenizer import EOA, OBS

# The chat role of each segment kind (shown with the segment in trajectory events).
ROLE_OF_KIND = {
    "prompt": "user",
    "action": "assistant",
    "tool": "tool",
    "subagent": "tool",
}
_PROBE = "\x01probe\x01"  # an assistant/tool content no template rewrites


class WordRenderer:
    """The built-in word grammar: ``<bos>``/``<eoa>``/``<obs>`` around plain words."""

    chat = False

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.bos_id = tokenizer.bos_token_id
        self.end_id = tokenizer.convert_tokens_to_ids(EOA)
        self.obs_id = tokenizer.convert_tokens_to_ids(OBS)
        self.stop_ids: tuple[int, ...] = (self.end_id,)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def prompt(
        self, prompt: str, messages: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        if messages and not prompt:
            prompt = " ".join(str(m.get("content", "")) for m in messages)
        return [self.bos_id, *self._encode(prompt)]

    def observation(self, text: str, *, closed: bool = True) -> list[int]:
        return [self.obs_id, *self._encode(text)]

    def action_ids(self, text: str) -> list[int]:
        """A scripted action as the policy would write it (warm start)."""
        return [*self._encode(text), self.end_id]

    def action_text(self, ids: Sequence[int]) -> str:
        return action_text(self.tokenizer, ids, self.stop_ids)


class ChatRenderer:
    """Prompts, actions and observations as the tokenizer's chat template writes them."""

    chat = True

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, extra_stop_ids: Sequence[int] = ()
    ) -> None:
        self.tokenizer = tokenizer
        self.bos_id = tokenizer.bos_token_id
        self.obs_id = None
        # What the template writes after an assistant message's content: its first
        # token, when special, is the end-of-turn token generation stops at.
        probe = [
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": _PROBE},
        ]
        closed = self._render(probe, generation_prompt=False)
        self._after_assistant = closed[closed.rindex(_PROBE) + len(_PROBE) :]
        tail = self._encode(self._after_assistant)
        special = set(tokenizer.all_special_ids)
        eos = tokenizer.eos_token_id
        end = tail[0] if tail and tail[0] in special else eos
        if end is None:
            raise ValueError(
                "model.path: the chat template ends an assistant turn with no special "
                "token and the tokenizer has no EOS token: generation could not stop"
            )
        self.end_id = int(end)
        stops = [self.end_id, eos, *extra_stop_ids]
        self.stop_ids = tuple(dict.fromkeys(int(s) for s in stops if s is not None))
        self._end_text = tokenizer.convert_ids_to_tokens(self.end_id)
        # A tool message and the next generation prompt, as the template adds them
        # after a closed assistant turn.
        with_tool = self._render(
            [*probe, {"role": "tool", "content": _PROBE}], generation_prompt=True
        )
        if not with_tool.startswith(closed):
            raise ValueError(
                "model.path: the chat template does not render a tool message after "
                "an assistant turn as a continuation of the conversation"
            )
        self._tool_template = with_tool[len(closed) :]
        if _PROBE not in self._tool_template:
            raise ValueError(
                "model.path: the chat template drops messages with role 'tool'"
            )

    def _render(
        self, messages: Sequence[Mapping[str, Any]], *, generation_prompt: bool
    ):
        return self.tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=generation_prompt,
        )

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def prompt(
        self, prompt: str, messages: Sequence[Mapping[str, Any]] = ()
    ) -> list[int]:
        msgs = list(messages) or [{"role": "user", "content": prompt}]
        return self._encode(self._render(msgs, generation_prompt=True))

    def observation(self, text: str, *, closed: bool = True) -> list[int]:
        """The tokens after an assistant turn: the rest of the turn (everything after
        the end-of-turn token, or all of it when generation hit its budget first), the
        tool message and the next generation prompt."""
        rest = self._after_assistant
        if closed and rest.startswith(self._end_text):
            rest = rest[len(self._end_text) :]
        return self._encode(rest + self._tool_template.replace(_PROBE, text))

    def action_ids(self, text: str) -> list[int]:
        return [*self._encode(text), self.end_id]

    def action_text(self, ids: Sequence[int]) -> str:
        return action_text(self.tokenizer, ids, self.stop_ids)


Renderer = WordRenderer | ChatRenderer


def action_text(
    tokenizer: PreTrainedTokenizerBase, ids: Sequence[int], stop_ids: Sequence[int]
) -> str:
    """The text of an action as the environment parses it: the model's own special
    tokens kept (a chat tokenizer's ``<tool_call>`` tags are special, and a call
    decoded without them is never executed); only the end of turn (``stop_ids``),
    padding and BOS dropped."""
    drop = {*stop_ids, tokenizer.pad_token_id, tokenizer.bos_token_id} - {None}
    return tokenizer.decode(
        [t for t in ids if t not in drop], skip_special_tokens=False
    )


def make_renderer(
    tokenizer: PreTrainedTokenizerBase, extra_stop_ids: Sequence[int] = ()
) -> Renderer:
    """The chat renderer when the tokenizer has a chat template, else the word one."""
    if getattr(tokenizer, "chat_template", None):
        return ChatRenderer(tokenizer, extra_stop_ids)
    return WordRenderer(tokenizer)
