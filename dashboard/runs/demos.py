"""The demo runs ``manage.py bootstrap_demo`` launches in the embedded default: plain
data (no Django import), so that ``bench/`` measures the very configs a newcomer
watches (``bench/hacking_cases.py`` trains the live swarm demo as a healthy run).
"""

from __future__ import annotations

# The calc learning demo (bench/configs/calc.yaml), shortened: the default model learns
# to call the calculator with "+" and to answer with its result; the reward climbs from
# about 0.2 towards 0.5. On 2 quiet cores its warm start takes ~25 s and its 200 steps
# end ~96 s after `make run`; a busy machine slows it several times (README, Quick start).
DEMO_CONFIG = {
    "name": "demo: calc, GRPO",
    "seed": 0,
    "steps": 200,
    "env": {"name": "calc", "params": {"ops": ["add"]}},
    "model": {"size": "tiny", "device": "cpu", "warmstart_steps": 300},
    "rollout": {
        "tasks_per_step": 8,
        "group_size": 8,
        "max_turns": 3,
        "max_action_tokens": 10,
    },
    "algorithm": {"preset": "grpo"},
    "optim": {"lr": 0.0003},
    "checkpoint": {"every": 20},
    "reward": {
        "components": [
            {"name": "outcome", "weight": 1.0, "params": {"partial_credit": True}},
            {"name": "format", "weight": 0.1},
        ]
    },
}


# Something to watch live for a while (half an hour or more on 2 quiet cores): the swarm
# (PARL) environment, where the orchestrator learns to fan subtasks out to sub-agents,
# with critical paths to look at on the way. Paid by r_perf (success, discounted by
# critical steps) and format alone, as bench/configs/swarm.yaml: with the default swarm
# reward's r_parallel and r_finish (0.3 each, annealed to 0 by step 100) the tiny model
# learned those and its success fell to 0 (0.10 over steps 1-25, 0.000 over 151-250)
# while its reward fell 0.43 -> 0.12. Measured on one thread, 250 RL steps from the same
# warm start: success 0.11 -> 0.20 (steps 76-150) -> 0.68 (151-250), parallelism 1.5 ->
# 3.8 sub-agents; seed 1: 0.11 -> 0.38 -> 0.75.
LIVE_DEMO_CONFIG = {
    "name": "demo: swarm, live for a while",
    "seed": 0,
    "steps": 1500,
    "env": {"name": "swarm"},
    "model": {"size": "tiny", "device": "cpu", "warmstart_steps": 300},
    "rollout": {
        "tasks_per_step": 4,
        "group_size": 8,
        "max_turns": 6,
        "max_action_tokens": 10,
    },
    "algorithm": {"preset": "grpo"},
    "optim": {"lr": 0.0003},
    "checkpoint": {"every": 50},
    "reward": {
        "components": [
            {
                "name": "r_perf",
                "weight": 1.0,
                "params": {"budget": 40, "discount": 0.5},
            },
            {"name": "format", "weight": 0.05},
        ]
    },
}
DEMOS = (DEMO_CONFIG, LIVE_DEMO_CONFIG)
