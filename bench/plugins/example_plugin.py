"""An example plugin: the ``echo`` environment and the ``echo_match`` reward.

Load it with ``PLUGINS=bench.plugins.example_plugin`` (web and worker) or
``python -m trainer run CONFIG --plugin bench.plugins.example_plugin``; a config can
then say ``env: {name: echo, params: {words: 4}}`` and reward ``echo_match``.
"""

from __future__ import annotations

import random

from pydantic import Field

from rewards.components import Context, on_last, register_component
from rewards.params import Params
from rewards.types import Episode, StepFacts
from trainer.envs.base import (
    ENVIRONMENTS,
    Environment,
    EnvParams,
    EnvSession,
    StepResult,
    Task,
)

COLOURS = ["red", "green", "blue", "black", "white", "pink", "grey", "gold"]


class EchoParams(EnvParams):
    words: int = Field(4, ge=2, le=len(COLOURS), description="Colours to pick from.")


@ENVIRONMENTS.register("echo")
class EchoEnv(Environment):
    """Say the colour the prompt names; success = exactly that word."""

    name = "echo"
    label = "say the colour the prompt names"
    Params = EchoParams
    default_reward = {"components": [{"name": "echo_match"}]}

    def vocabulary(self) -> list[str]:
        return ["say", *COLOURS]

    def sample_tasks(self, n: int, rng: random.Random) -> list[Task]:
        picks = [rng.choice(COLOURS[: self.params.words]) for _ in range(n)]
        return [Task(f"echo-{w}", f"say {w}", {"word": w}) for w in picks]

    def start(self, task: Task) -> EnvSession:
        return EchoSession(self, task)


class EchoSession(EnvSession):
    def __init__(self, env: EchoEnv, task: Task) -> None:
        self.env, self.task, self.steps = env, task, []

    def step(self, action: str) -> StepResult:
        facts = StepFacts(len(self.steps), action, None, True, "", {"said": action})
        self.steps.append(facts)
        return StepResult("", True, facts)  # one turn: the action is the answer

    def episode(self, *, truncated: bool) -> Episode:
        said = self.steps[-1].action.split() if self.steps else []
        word = self.task.payload["word"]
        facts = {"success": said == [word] and not truncated, "mentioned": word in said}
        return Episode(self.task.id, "echo", self.task.prompt, tuple(self.steps), facts)

    def random_action(self, rng: random.Random) -> str:
        return rng.choice(COLOURS[: self.env.params.words])


class EchoMatchParams(Params):
    partial: float = Field(
        0.5, ge=0, le=1, description="Paid when the word is said among others."
    )


@register_component("echo_match", EchoMatchParams, envs={"echo"})
def echo_match(ep: Episode, p: EchoMatchParams, ctx: Context) -> tuple[float, ...]:
    """1 for exactly the colour, ``partial`` if it is among the words said, on the
    last step.

    >>> from rewards.synthetic import episode
    >>> echo_match(episode("echo", [{}], success=False, mentioned=True),
    ...            EchoMatchParams(), Context())
    (0.5,)
    """
    value = (
        1.0 if ep.facts.get("success") else p.partial * bool(ep.facts.get("mentioned"))
    )
    return on_last(ep, value)
