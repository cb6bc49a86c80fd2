"""Expressions in x, y, z and the time t from user text (boundary velocities of a case file or
the API), read by a small whitelisted grammar: never by Python's eval.

    expression := number | x | y | z | t | pi | name "(" expression ")"
                | expression op expression | ("+" | "-") expression | "(" expression ")"
    op         := + | - | * | / | **
    name       := sqrt | sin | cos | exp

The text is parsed by Python's own parser (ast, which builds a tree and runs nothing)
and every node of the tree is checked against the grammar; anything else (attributes,
subscripts, comparisons, other names or calls, keywords, strings) is an InputError that
names the offending piece. Evaluation walks the checked tree with the array module of
the points (NumPy or CuPy), in float64.
"""

from __future__ import annotations

import ast
import math

import numpy as np

from gpucfd.errors import InputError, finite_real, shown

MAX_LENGTH = 1000  # characters of one expression
MAX_DEPTH = 60  # nesting of operations
VARIABLES = ("x", "y", "z", "t")  # t: the time, 0 in a steady flow
CONSTANTS = {"pi": math.pi}
FUNCTIONS = ("sqrt", "sin", "cos", "exp")
OPERATORS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide", ast.Pow: "power"}
GRAMMAR = "numbers, x, y, z, t, pi, + - * / **, parentheses, sqrt, sin, cos, exp"


class Expression:
    """A checked expression; ``expr(xp, points, t)`` -> its values (...) at points (..., 3) and
    time t (default 0).

    ``text`` the source; ``constant`` its value when it names no variable, else None;
    ``in_time``: it names t.
    ``where`` names the input in error messages (e.g. ``boundary "inflow" velocity x``).
    """

    def __init__(self, text, where: str = "expression"):
        if not isinstance(text, str) and not finite_real(text):
            raise InputError(f"{where}: expected a finite number or an expression in x, y, z, t (got {shown(text)})")
        self.where = where
        self.text = text if isinstance(text, str) else repr(float(text))
        if len(self.text) > MAX_LENGTH:
            raise InputError(f"{where}: the expression is longer than {MAX_LENGTH} characters")
        try:
            tree = ast.parse(self.text.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            raise InputError(f"{where}: {shown(self.text)} is not an expression ({GRAMMAR})") from None
        self._tree = self._check(tree.body, 0)
        names = self._names(self._tree)
        self.in_time = "t" in names
        self.constant = None if names & set(VARIABLES) else self._constant_value()

    def _fail(self, what: str):
        raise InputError(f"{self.where}: {what} is not allowed in {shown(self.text)} (allowed: {GRAMMAR})")

    def _check(self, node, depth: int):
        """``node`` if it and its children are in the grammar; InputError otherwise."""
        if depth > MAX_DEPTH:
            raise InputError(f"{self.where}: {shown(self.text)} nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, ast.Constant):
            value = node.value
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                self._fail(f"the constant {value!r}")
            if not finite_real(value):
                raise InputError(
                    f"{self.where}: the number {shown(value)} in {shown(self.text)} is not a finite float64"
                )
            return node
        if isinstance(node, ast.Name):
            if node.id not in VARIABLES and node.id not in CONSTANTS:
                self._fail(f"the name {node.id!r}")
            return node
        if isinstance(node, ast.BinOp):
            if type(node.op) not in OPERATORS:
                self._fail(f"the operator {type(node.op).__name__}")
            self._check(node.left, depth + 1)
            self._check(node.right, depth + 1)
            return node
        if isinstance(node, ast.UnaryOp):
            if not isinstance(node.op, (ast.UAdd, ast.USub)):
                self._fail(f"the operator {type(node.op).__name__}")
            self._check(node.operand, depth + 1)
            return node
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
                self._fail(f"the call {ast.unparse(node.func)}(...)")
            if len(node.args) != 1 or node.keywords or isinstance(node.args[0], ast.Starred):
                self._fail(f"{node.func.id} with other than one argument")
            self._check(node.args[0], depth + 1)
            return node
        self._fail(f"{type(node).__name__.lower()} {ast.unparse(node)!r}")

    def _names(self, node) -> set:
        return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}

    def _constant_value(self) -> float:
        value = float(self(np, np.zeros(3)))
        if not math.isfinite(value):
            raise InputError(f"{self.where}: {shown(self.text)} is not a finite number (evaluates to {value})")
        return value

    def __call__(self, xp, points, t: float = 0.0):
        points = xp.asarray(points, dtype=np.float64)
        with np.errstate(all="ignore"):
            value = self._eval(xp, self._tree, points, float(t))
        return xp.broadcast_to(xp.asarray(value, dtype=np.float64), points.shape[:-1])

    def _eval(self, xp, node, points, t: float):
        if isinstance(node, ast.Constant):
            return float(node.value)
        if isinstance(node, ast.Name):
            if node.id == "t":
                return t
            return points[..., VARIABLES.index(node.id)] if node.id in VARIABLES else CONSTANTS[node.id]
        if isinstance(node, ast.UnaryOp):
            value = self._eval(xp, node.operand, points, t)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.Call):
            return getattr(xp, node.func.id)(xp.asarray(self._eval(xp, node.args[0], points, t), dtype=np.float64))
        left = xp.asarray(self._eval(xp, node.left, points, t), dtype=np.float64)
        return getattr(xp, OPERATORS[type(node.op)])(left, self._eval(xp, node.right, points, t))

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"
