"""Expressions of a search-space file: derived values (`dp = "gpus // (tp * pp)"`) and constraints
(`"global_batch % (dp * micro_batch) == 0"`).

A small, safe subset of Python's expression syntax, parsed once with `ast` so that a typo or an
unknown name is reported when the space file is read, before any trial runs: numbers, strings,
booleans, names, arithmetic (`+ - * / // % **`), comparisons (also chained and `in`), `and`,
`or`, `not`, `x if c else y`, lists/tuples, and the functions in FUNCTIONS. Nothing else
(attributes, subscripts, lambdas, comprehensions) is accepted: a space file is data, not code.
"""

from __future__ import annotations

import ast
import math
import operator
from dataclasses import dataclass, field

FUNCTIONS = {"min": min, "max": max, "abs": abs, "int": int, "float": float, "round": round,
             "ceil": math.ceil, "floor": math.floor, "log2": math.log2, "sqrt": math.sqrt}

_BIN = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMP = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
        ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}


class ExprError(ValueError):
    """An expression that cannot be parsed, or one that uses what a space file may not."""


class EvalError(ValueError):
    """An expression that failed for one configuration (division by zero, log of 0): that configuration
    is infeasible, with this as the reason."""


@dataclass(frozen=True)
class Expr:
    """A parsed expression: its source text, the names it reads, and the checked syntax tree."""

    text: str
    names: frozenset[str]
    tree: ast.Expression = field(compare=False, repr=False)

    def __call__(self, values: dict):
        try:
            return _eval(self.tree.body, values)
        except (ZeroDivisionError, ValueError, TypeError, OverflowError) as e:
            raise EvalError(f"{self.text!r}: {type(e).__name__}: {e}") from None


def parse(text: str, where: str) -> Expr:
    """Parse `text` (from `where`, for the message) or raise ExprError."""
    if not isinstance(text, str) or not text.strip():
        raise ExprError(f"{where}: expected an expression string, got {text!r}")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as e:
        raise ExprError(f"{where}: {text!r} is not an expression ({e.msg})") from None
    names: set[str] = set()
    for node in ast.walk(tree):
        _check(node, text, where)
        if isinstance(node, ast.Name) and node.id not in FUNCTIONS:
            names.add(node.id)
    return Expr(text=text.strip(), names=frozenset(names), tree=tree)


_ALLOWED = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.Name, ast.Constant, ast.Load,
            ast.IfExp, ast.Call, ast.List, ast.Tuple, ast.And, ast.Or, *_BIN, *_CMP, *_UNARY)


def _check(node: ast.AST, text: str, where: str) -> None:
    if not isinstance(node, _ALLOWED):
        raise ExprError(f"{where}: {text!r} uses {type(node).__name__}, which a space file does not allow "
                        "(arithmetic, comparisons, and/or/not, if-else and " + ", ".join(FUNCTIONS) + " only)")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS or node.keywords:
            raise ExprError(f"{where}: {text!r} calls something other than " + ", ".join(FUNCTIONS))
    if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str | bool):
        raise ExprError(f"{where}: {text!r} has a constant of type {type(node.value).__name__}")


def _eval(node: ast.AST, values: dict):
    t = type(node)
    if t is ast.Constant:
        return node.value
    if t is ast.Name:
        if node.id in FUNCTIONS:
            return FUNCTIONS[node.id]
        return values[node.id]
    if t is ast.BinOp:
        return _BIN[type(node.op)](_eval(node.left, values), _eval(node.right, values))
    if t is ast.UnaryOp:
        return _UNARY[type(node.op)](_eval(node.operand, values))
    if t is ast.BoolOp:
        if isinstance(node.op, ast.And):
            return all(_eval(v, values) for v in node.values)
        return any(_eval(v, values) for v in node.values)
    if t is ast.Compare:
        left = _eval(node.left, values)
        for op, right_node in zip(node.ops, node.comparators, strict=True):
            right = _eval(right_node, values)
            if not _CMP[type(op)](left, right):
                return False
            left = right
        return True
    if t is ast.IfExp:
        return _eval(node.body, values) if _eval(node.test, values) else _eval(node.orelse, values)
    if t is ast.Call:
        return FUNCTIONS[node.func.id](*(_eval(a, values) for a in node.args))
    if t in (ast.List, ast.Tuple):
        return tuple(_eval(e, values) for e in node.elts)
    raise EvalError(f"cannot evaluate {type(node).__name__}")  # unreachable after _check
