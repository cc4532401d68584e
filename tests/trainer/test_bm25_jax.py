"""bm25s probes JAX when imported; on a GPU machine JAX would then take 75% of the
GPU's memory from PyTorch. Building a search index keeps JAX on the CPU unless the
user chose its platform."""

from __future__ import annotations

import os
import subprocess
import sys


def _platform_after_building_the_search_env(env: dict[str, str]) -> str:
    code = (
        "import os\n"
        "from trainer.envs.base import make_env\n"
        "make_env('search', seed=0)\n"
        "print(os.environ.get('JAX_PLATFORMS', '<unset>'))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    return out.stdout.strip().splitlines()[-1]


def test_the_search_index_keeps_jax_off_the_gpu():
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
    assert _platform_after_building_the_search_env(env) == "cpu"


def test_a_users_own_jax_platform_is_kept():
    env = {**os.environ, "JAX_PLATFORMS": "cuda,cpu"}
    assert _platform_after_building_the_search_env(env) == "cuda,cpu"
