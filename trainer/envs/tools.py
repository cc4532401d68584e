"""Tools an environment can offer, and reading tool calls out of a model's action.

A tool call is written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (the
common JSON form chat models are trained on); a word-level model may also write
``<tool> <argument text>`` (``calculator 7 + 5``), which fills the tool's main
argument. An action with neither is a final answer. A malformed call is never raised:
:func:`parse_action` returns it with a message the environment shows the model.

Built-in tools: ``calculator`` (exact arithmetic, no ``eval``) and ``search`` (BM25 over
a corpus file, one document per line or JSONL ``{"id", "text"}``). Tools are
registered in :data:`TOOLS`; a tool knows nothing of rewards.
"""

from __future__ import annotations

import ast
import json
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from rewards.registry import Registry

MAX_CALL_CHARS = 4096
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)


class ToolError(ValueError):
    """A call a tool cannot carry out; the message becomes the observation."""


@dataclass(frozen=True)
class ToolSpec:
    """``main_arg``: the argument a word-form call (``<tool> <text>``) fills."""

    name: str
    main_arg: str
    description: str
    build: Callable[[Mapping[str, Any]], Callable[[Mapping[str, Any]], str]]
    # True: a built tool may run on several threads at once (it mutates nothing).
    thread_safe: bool = False


TOOLS: Registry[ToolSpec] = Registry("tool")


@dataclass(frozen=True)
class ParsedAction:
    """``kind``: "call" (``name``/``arguments`` set), "answer" or "malformed"
    (``error`` says what is wrong, in words the model can act on)."""

    kind: str
    name: str | None = None
    arguments: Mapping[str, Any] = field(default_factory=dict)
    error: str | None = None


def parse_action(text: str, tools: list[str]) -> ParsedAction:
    """The tool call in ``text`` (the first one), or a final answer."""
    if "<tool_call>" in text:
        return _parse_json_call(text, tools)
    words = text.split()
    if words and words[0] in tools:
        spec = TOOLS.get(words[0])
        return ParsedAction("call", words[0], {spec.main_arg: " ".join(words[1:])})
    return ParsedAction("answer")


def _parse_json_call(text: str, tools: list[str]) -> ParsedAction:
    def bad(msg: str) -> ParsedAction:
        return ParsedAction("malformed", error=f"error: {msg}")

    m = _CALL.search(text)
    if m is None:
        return bad("unterminated tool call; write <tool_call>{json}</tool_call>")
    body = m.group(1).strip()
    if len(body) > MAX_CALL_CHARS:
        return bad(f"tool call longer than {MAX_CALL_CHARS} characters")
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as exc:
        return bad(f"tool call is not valid JSON ({exc.msg} at char {exc.pos})")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return bad('tool call needs {"name": string, "arguments": object}')
    args = obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments JSON-encoded
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            args = None
    if not isinstance(args, dict):
        return bad("tool call arguments must be a JSON object")
    if obj["name"] not in tools:
        known = ", ".join(tools) or "none"
        return bad(f"unknown tool {obj['name'][:64]!r} (available: {known})")
    return ParsedAction("call", obj["name"], args)


# ----- calculator -------------------------------------------------------------------
_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
MAX_EXPRESSION_CHARS = 200
MAX_MAGNITUDE = Fraction(10) ** 15


def calculate(expression: str) -> str:
    """Exact arithmetic on numbers with ``+ - * / // % **`` and parentheses.

    >>> calculate("7 + 5 * 2"), calculate("1 / 4"), calculate("2 ** 10")
    ('17', '0.25', '1024')
    """
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.replace("^", "**").strip(), mode="eval")
    except SyntaxError:
        raise ToolError(f"cannot parse expression {expression[:64]!r}") from None
    value = _eval(tree.body)
    if value.denominator == 1:
        return str(value.numerator)
    return f"{float(value):.6g}"


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        v = _eval(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        a, b = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and (b.denominator != 1 or abs(b) > 64):
            raise ToolError("exponent must be a whole number of at most 64")
        if b == 0 and isinstance(node.op, ast.Div | ast.FloorDiv | ast.Mod):
            raise ToolError("division by zero")
        out = Fraction(_BINARY[type(node.op)](a, b))
        if abs(out) > MAX_MAGNITUDE:
            raise ToolError("result too large")
        return out
    raise ToolError("only numbers, + - * / // % ** and parentheses are allowed")


def _build_calculator(_: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], str]:
    def run(arguments: Mapping[str, Any]) -> str:
        expr = arguments.get("expression")
        if not isinstance(expr, str):
            raise ToolError('calculator needs {"expression": string}')
        return calculate(expr)

    return run


TOOLS.register("calculator")(
    ToolSpec(
        "calculator",
        "expression",
        'calculator: {"expression": "7 + 5 * 2"} -> the exact result',
        _build_calculator,
        thread_safe=True,  # a pure function of its arguments
    )
)


# ----- search -----------------------------------------------------------------------
def read_corpus(path: str) -> list[tuple[str, str]]:
    """(id, text) per document: JSONL ``{"id", "text"}`` lines, else one text a line."""
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"corpus_path: {path!r} is not a file")
    docs: list[tuple[str, str]] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        line = line.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                obj = json.loads(line)
                docs.append((str(obj.get("id", f"d{n}")), str(obj["text"])))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise ValueError(
                    f'corpus_path: line {n} is not a JSON object with "text"'
                ) from None
        else:
            docs.append((f"d{n}", line))
    if not docs:
        raise ValueError(f"corpus_path: {path!r} holds no documents")
    return docs


def _build_search(params: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], str]:
    from trainer.envs.bm25 import new_index
    from trainer.envs.search_corpus import index_words

    if not params.get("corpus_path"):
        raise ValueError("corpus_path: the search tool needs a corpus file")
    docs = read_corpus(str(params["corpus_path"]))
    top_k = int(params.get("top_k", 3))
    index = new_index([index_words(t.lower()) for _, t in docs])

    def run(arguments: Mapping[str, Any]) -> str:
        query = arguments.get("query")
        if not isinstance(query, str) or not query.strip():
            raise ToolError('search needs {"query": string}')
        words = [w for w in index_words(query.lower()) if w in index.vocab_dict]
        if not words:
            return "no results"
        scores = index.get_scores(words)
        order = sorted(range(len(docs)), key=lambda i: -scores[i])[:top_k]
        hits = [f"[{docs[i][0]}] {docs[i][1]}" for i in order if scores[i] > 0]
        return "\n".join(hits) or "no results"

    return run


TOOLS.register("search")(
    ToolSpec(
        "search",
        "query",
        'search: {"query": "words"} -> the best matching documents of the corpus',
        _build_search,
        thread_safe=True,  # reads its index only
    )
)


def call_tool(
    runners: Mapping[str, Callable[[Mapping[str, Any]], str]], action: ParsedAction
) -> tuple[bool, str]:
    """(ok, observation) for a parsed call; a tool's error becomes the observation."""
    try:
        return True, runners[str(action.name)](action.arguments)
    except ToolError as exc:
        return False, f"error: {exc}"
