"""Arithmetic IR of the gCoT paper's logical-verification dimension: types, parsing, validation.

The IR is the JSON format published with "Multi-Dimensional Evaluation of Auto-Generated
Chain-of-Thought Traces in Reasoning Models" (Becerra, Sanchez-Torres, Branch-Bedoya, 2025), as found in
sanchezgt/md-eval-cot `characterization/automatic/z3-based/human_eval_gsm8k_acs.json`::

    {"variables": [{"name": "x", "type": "Int" | "Real"}, ...],
     "steps": [
       {"track": "s1", "op": "set", "var": "x", "value": 12},
       {"track": "s2", "op": "update", "var": "x", "arith": {"kind": "add|sub|mul|div", "value": 3}},
       {"track": "s3", "op": "set_expr", "var": "y",
        "expr": {"op": "add|sub|mul|div", "left": OPERAND, "right": OPERAND}},
       {"track": "s4", "op": "assert_eq|assert_ge|assert_le", "lhs": OPERAND, "rhs": OPERAND}]}

    OPERAND = {"var": "x"} | {"const": 3} | {"op": ..., "left": OPERAND, "right": OPERAND}

Accepted variants that the authors' compiler also reads: a `set_expr` target given as
`"lhs": {"var": "y"}` instead of `"var"` (only the repository dialect compiles it, see
`z3_verify.Dialect`), and an assert written as `{"var": "x", "value": 3}`. Nested operands are an
extension: the authors' script raises on them and drops the step, which `z3_verify` does too unless asked
to compile them (`allow_nested=True`).

`parse_ir` is strict by default and names the step index and field of the first problem. With
`lenient=True` it mirrors the authors' compiler, which silently skips a step it cannot read: such a step
becomes a `SkippedStep` that keeps the raw dict (their answer and shortcut logic still reads it) and,
where their code had already advanced the target's SSA version before failing, the variable bumped.
The published IRs need this: 5 of the 80 contain `set_expr` steps without an `expr`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast, get_args

VarType = Literal["Int", "Real"]
ArithOp = Literal["add", "sub", "mul", "div"]
AssertOp = Literal["assert_eq", "assert_ge", "assert_le"]
ARITH_OPS: tuple[str, ...] = get_args(ArithOp)
ASSERT_OPS: tuple[str, ...] = get_args(AssertOp)
STEP_OPS: tuple[str, ...] = ("set", "update", "set_expr", *ASSERT_OPS)
DEFAULT_TIMEOUT_MS = 10_000
"""Z3 time limit per solver check (the `z3` command's and the quality stage's default)."""


class IRValidationError(ValueError):
    """An IR that cannot be read; `path` names the offending place, e.g. ``steps[3].expr.left``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Variable:
    name: str
    type: VarType = "Int"


@dataclass(frozen=True, slots=True)
class VarRef:
    var: str


@dataclass(frozen=True, slots=True)
class Const:
    """A numeric literal, held as the float the authors' `_to_num` starts from (`float(value)`)."""

    value: float

    def json_value(self) -> int | float:
        return int(self.value) if self.value.is_integer() else self.value


@dataclass(frozen=True, slots=True)
class BinExpr:
    op: ArithOp
    left: Operand
    right: Operand


Operand: TypeAlias = VarRef | Const | BinExpr


@dataclass(frozen=True, slots=True)
class SetStep:
    track: str
    var: str
    value: float


@dataclass(frozen=True, slots=True)
class UpdateStep:
    track: str
    var: str
    kind: ArithOp
    value: float


@dataclass(frozen=True, slots=True)
class SetExprStep:
    track: str
    var: str
    expr: BinExpr
    target_field: Literal["var", "lhs"] = "var"


@dataclass(frozen=True, slots=True)
class AssertStep:
    track: str
    op: AssertOp
    lhs: Operand
    rhs: Operand
    form: Literal["sides", "var_value"] = "sides"


@dataclass(frozen=True, slots=True)
class SkippedStep:
    """A step the authors' compiler would skip (lenient parsing only).

    `bumps` is the variable whose SSA version their code advanced before failing on the step, so a
    faithful compile must advance it too (later reads then see a fresh, unconstrained symbol).
    """

    track: str | None
    op: str | None
    reason: str
    bumps: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


Step: TypeAlias = SetStep | UpdateStep | SetExprStep | AssertStep | SkippedStep


@dataclass(frozen=True, slots=True)
class IR:
    variables: tuple[Variable, ...]
    steps: tuple[Step, ...]

    @property
    def var_types(self) -> dict[str, VarType]:
        return {v.name: v.type for v in self.variables}

    @property
    def tracks(self) -> tuple[str, ...]:
        return tuple(s.track for s in self.steps if s.track)

    def to_dict(self) -> dict[str, Any]:
        """The published JSON form; `parse_ir(ir.to_dict()) == ir` for IRs without skipped steps."""
        return {
            "variables": [{"name": v.name, "type": v.type} for v in self.variables],
            "steps": [step_to_dict(s) for s in self.steps],
        }


def operand_to_dict(o: Operand) -> dict[str, Any]:
    if isinstance(o, VarRef):
        return {"var": o.var}
    if isinstance(o, Const):
        return {"const": o.json_value()}
    return {"op": o.op, "left": operand_to_dict(o.left), "right": operand_to_dict(o.right)}


def step_to_dict(s: Step) -> dict[str, Any]:
    if isinstance(s, SkippedStep):
        return dict(s.raw)
    if isinstance(s, SetStep):
        return {"track": s.track, "op": "set", "var": s.var, "value": Const(s.value).json_value()}
    if isinstance(s, UpdateStep):
        return {
            "track": s.track,
            "op": "update",
            "var": s.var,
            "arith": {"kind": s.kind, "value": Const(s.value).json_value()},
        }
    if isinstance(s, SetExprStep):
        target: dict[str, Any] = {"var": s.var} if s.target_field == "var" else {"lhs": {"var": s.var}}
        return {"track": s.track, "op": "set_expr", **target, "expr": operand_to_dict(s.expr)}
    if s.form == "var_value" and isinstance(s.lhs, VarRef) and isinstance(s.rhs, Const):
        return {"track": s.track, "op": s.op, "var": s.lhs.var, "value": s.rhs.json_value()}
    return {"track": s.track, "op": s.op, "lhs": operand_to_dict(s.lhs), "rhs": operand_to_dict(s.rhs)}


class _StepProblem(Exception):
    """Internal: a step-level problem, turned into IRValidationError or SkippedStep by `parse_ir`."""

    def __init__(self, field_name: str, message: str, bumps: str | None = None) -> None:
        super().__init__(message)
        self.field_name = field_name
        self.message = message
        self.bumps = bumps


def _number(value: Any, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise _StepProblem(field_name, f"expected a number, got {_repr(value)}")
    try:
        f = float(value)
    except ValueError:
        raise _StepProblem(field_name, f"expected a number, got {_short(value)}") from None
    except OverflowError:  # an integer like 10**400: no float holds it
        raise _StepProblem(field_name, f"number too large, got {_short(value)}") from None
    if not math.isfinite(f):
        raise _StepProblem(field_name, f"expected a finite number, got {_short(value)}")
    return f


def _repr(value: Any) -> str:
    """`repr(value)` for an error message, also for a value that has none: an int with more digits than
    Python converts to text (alone or inside a list), a list nested past the recursion limit."""
    try:
        return repr(value)
    except ValueError:
        if isinstance(value, int):
            return f"<an integer of about {value.bit_length() * 0.30103:.0f} digits>"
        return f"<a {type(value).__name__} holding an integer too long to print>"
    except RecursionError:
        return f"<a {type(value).__name__} nested too deep to print>"


def _short(value: Any, width: int = 40) -> str:
    """A value for an error message: its repr, cut to `width` characters (a 400-digit constant)."""
    text = _repr(value)
    return text if len(text) <= width else f"{text[: width - 5]}...({len(text)} characters)"


def _name(value: Any, field_name: str) -> str:
    if not isinstance(value, str) or not value:
        raise _StepProblem(field_name, f"expected a non-empty variable name, got {_repr(value)}")
    return value


MAX_OPERAND_DEPTH = 100
"""Operands nested deeper than this make the IR invalid, in lenient parsing too (the published IRs nest
at most 3 deep): parsing, compiling and printing an operand recurse once per level, and Python's stack
would overflow first (a `RecursionError`, which `z3_verify` reported the same way)."""


class _TooDeep(_StepProblem):
    """Internal: an operand nested past MAX_OPERAND_DEPTH; `parse_ir` raises it as IRValidationError."""


def _operand(obj: Any, path: str, depth: int = 0) -> Operand:
    if depth > MAX_OPERAND_DEPTH:
        raise _TooDeep(path, f"operand nested too deeply (more than {MAX_OPERAND_DEPTH} levels)")
    if not isinstance(obj, Mapping):
        raise _StepProblem(path, f"expected an operand object, got {_repr(obj)}")
    if obj.get("var") is not None:
        return VarRef(_name(obj["var"], f"{path}.var"))
    if obj.get("const") is not None:
        return Const(_number(obj["const"], f"{path}.const"))
    if "op" in obj:
        return _binexpr(obj, path, depth)
    raise _StepProblem(path, "operand needs 'var', 'const' or 'op'/'left'/'right'")


def _binexpr(obj: Any, path: str, depth: int = 0) -> BinExpr:
    if not isinstance(obj, Mapping):
        raise _StepProblem(path, f"expected an expression object, got {_repr(obj)}")
    op = obj.get("op")
    if op not in ARITH_OPS:
        raise _StepProblem(f"{path}.op", f"expected one of {ARITH_OPS}, got {_repr(op)}")
    left = _operand(obj.get("left"), f"{path}.left", depth + 1)
    right = _operand(obj.get("right"), f"{path}.right", depth + 1)
    return BinExpr(cast(ArithOp, op), left, right)


def _parse_step(st: Mapping[str, Any]) -> Step:
    """Read one step; raise `_StepProblem` where the authors' compiler would skip it.

    The `bumps` set on a problem follows their statement order: `set` and `update` advance the target
    before converting the value, `set_expr` advances it after checking `"op" in expr` but before
    reading the operands.
    """
    track = st.get("track")
    op = st.get("op")
    if not track:
        raise _StepProblem("track", "missing or empty")
    if not isinstance(track, str):
        raise _StepProblem("track", f"expected a string, got {_repr(track)}")
    if op not in STEP_OPS:
        raise _StepProblem("op", f"expected one of {STEP_OPS}, got {_repr(op)}")

    if op == "set":
        if st.get("var") is None:
            raise _StepProblem("var", "missing")
        if "value" not in st:
            raise _StepProblem("value", "missing")
        var = _name(st["var"], "var")
        try:
            return SetStep(track, var, _number(st["value"], "value"))
        except _StepProblem as e:
            raise type(e)(e.field_name, e.message, bumps=var) from None

    if op == "update":
        arith = st.get("arith") or {}
        if not isinstance(arith, Mapping):
            raise _StepProblem("arith", f"expected an object, got {_repr(arith)}")
        if st.get("var") is None:
            raise _StepProblem("var", "missing")
        kind = arith.get("kind")
        if kind not in ARITH_OPS:
            raise _StepProblem("arith.kind", f"expected one of {ARITH_OPS}, got {_repr(kind)}")
        if arith.get("value") is None:
            raise _StepProblem("arith.value", "missing")
        var = _name(st["var"], "var")
        try:
            return UpdateStep(track, var, cast(ArithOp, kind), _number(arith["value"], "arith.value"))
        except _StepProblem as e:
            raise type(e)(e.field_name, e.message, bumps=var) from None

    if op == "set_expr":
        target_field: Literal["var", "lhs"] = "var"
        raw_var = st.get("var")
        if raw_var is None and isinstance(st.get("lhs"), Mapping):
            raw_var = st["lhs"].get("var")
            target_field = "lhs"
        if raw_var is None:
            raise _StepProblem("var", "missing (neither 'var' nor 'lhs.var')")
        expr = st.get("expr")
        if not isinstance(expr, Mapping) or "op" not in expr:
            raise _StepProblem("expr", "missing, or not an object with 'op'/'left'/'right'")
        var = _name(raw_var, "var" if target_field == "var" else "lhs.var")
        try:
            return SetExprStep(track, var, _binexpr(expr, "expr"), target_field)
        except _StepProblem as e:
            # The repository dialect skips an lhs-targeted step only after bumping it; the published
            # dialect never reaches the bump (it ignores lhs targets), which the compiler accounts for.
            raise type(e)(e.field_name, e.message, bumps=var) from None

    lhs_raw, rhs_raw = st.get("lhs"), st.get("rhs")
    form: Literal["sides", "var_value"] = "sides"
    if lhs_raw is None and ("var" in st or "value" in st):
        form = "var_value"
        lhs_raw = {"var": st["var"]} if st.get("var") is not None else None
        rhs_raw = {"const": st["value"]} if st.get("value") is not None else None
    if lhs_raw is None:
        raise _StepProblem("lhs", "missing")
    if rhs_raw is None:
        raise _StepProblem("rhs", "missing")
    lhs = _operand(lhs_raw, "lhs")
    rhs = _operand(rhs_raw, "rhs")
    if not _has_var(lhs) and not _has_var(rhs):
        raise _StepProblem("lhs", "both sides are constant (Z3 rejects a Python bool as a constraint)")
    return AssertStep(track, cast(AssertOp, op), lhs, rhs, form)


def _has_var(o: Operand) -> bool:
    if isinstance(o, VarRef):
        return True
    if isinstance(o, Const):
        return False
    return _has_var(o.left) or _has_var(o.right)


def parse_ir(obj: Mapping[str, Any], *, lenient: bool = False) -> IR:
    """Validate a published-format IR dict and return an `IR`.

    Strict (default): any problem raises `IRValidationError` naming e.g. ``steps[4] (track 's5').expr``.
    Lenient: only structural problems raise (not an object, `variables`/`steps` not lists, a malformed
    declaration); unreadable steps become `SkippedStep`, as the authors' compiler skips them.
    """
    if not isinstance(obj, Mapping):
        raise IRValidationError("ir", f"expected an object, got {type(obj).__name__}")
    raw_vars = obj.get("variables") or []
    raw_steps = obj.get("steps") or []
    if not isinstance(raw_vars, list):
        raise IRValidationError("variables", "expected a list")
    if not isinstance(raw_steps, list):
        raise IRValidationError("steps", "expected a list")

    variables: dict[str, Variable] = {}
    for i, v in enumerate(raw_vars):
        path = f"variables[{i}]"
        if not isinstance(v, Mapping):
            raise IRValidationError(path, "expected an object with 'name' and 'type'")
        name = v.get("name")
        if not isinstance(name, str) or not name:
            raise IRValidationError(f"{path}.name", f"expected a non-empty string, got {_repr(name)}")
        vtype = v.get("type", "Int")
        if vtype not in ("Int", "Real"):
            raise IRValidationError(f"{path}.type", f"expected 'Int' or 'Real', got {_repr(vtype)}")
        if name in variables and not lenient:
            raise IRValidationError(f"{path}.name", f"variable {name!r} declared twice")
        variables[name] = Variable(name, cast(VarType, vtype))  # the authors' dict keeps the last

    steps: list[Step] = []
    for i, st in enumerate(raw_steps):
        if not isinstance(st, Mapping):
            if not lenient:
                raise IRValidationError(f"steps[{i}]", f"expected an object, got {_repr(st)}")
            steps.append(SkippedStep(None, None, "not an object", None, {}))
            continue
        try:
            steps.append(_parse_step(st))
        except _StepProblem as e:
            track = st.get("track")
            where = f"steps[{i}]" + (f" (track {track!r})" if isinstance(track, str) and track else "")
            if not lenient or isinstance(e, _TooDeep):
                raise IRValidationError(f"{where}.{e.field_name}", e.message) from None
            op = st.get("op")
            steps.append(
                SkippedStep(
                    track if isinstance(track, str) and track else None,
                    op if isinstance(op, str) else None,
                    f"{e.field_name}: {e.message}",
                    e.bumps,
                    dict(st),
                )
            )
    return IR(tuple(variables.values()), tuple(steps))
