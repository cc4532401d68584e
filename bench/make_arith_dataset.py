"""Arithmetic word problems with answers, as JSONL, for the ``dataset`` learning demo.

    python bench/make_arith_dataset.py [--out var/data/arith.jsonl] [--n 400] [--seed 0]

Deterministic: the same arguments write the same file. Each line is
``{"id", "prompt", "answer"}``; words are space-separated (punctuation too), so the
built-in word-level model reads them as they are.
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

NAMES = ["tom", "ann", "sam", "mia", "leo", "eva", "max", "zoe"]
ITEMS = ["apples", "pens", "books", "coins", "cards", "eggs"]
TEMPLATES = {
    "add": [
        "{n} has {a} {i} and gets {b} more . how many {i} does {n} have ?",
        "{n} buys {a} {i} and then {b} {i} . how many {i} in total ?",
    ],
    "sub": [
        "{n} has {a} {i} and gives away {b} . how many {i} are left ?",
        "{n} had {a} {i} and lost {b} . how many {i} now ?",
    ],
}


def problems(n: int, seed: int, ops: list[str], top: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for k in range(n):
        op = rng.choice(ops)
        a, b = rng.randint(1, top), rng.randint(1, top)
        if op == "sub" and b > a:
            a, b = b, a
        prompt = rng.choice(TEMPLATES[op]).format(
            n=rng.choice(NAMES), a=a, b=b, i=rng.choice(ITEMS)
        )
        answer = a + b if op == "add" else a - b
        out.append({"id": f"arith-{k}", "prompt": prompt, "answer": str(answer)})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="var/data/arith.jsonl")
    parser.add_argument("--n", type=int, default=400)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--ops", default="add,sub")
    parser.add_argument("--max-operand", type=int, default=20)
    args = parser.parse_args(argv)
    rows = problems(args.n, args.seed, args.ops.split(","), args.max_operand)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} problems to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
