"""Compilation of an arithmetic IR into a Z3 solver (the authors' `compile_ir`, see `z3_verify` for the
semantics and the two dialects), and one solver check with its unsat core."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import z3

from legival_core.quality.z3_ir import (
    IR,
    BinExpr,
    Const,
    Operand,
    SetExprStep,
    SetStep,
    SkippedStep,
    UpdateStep,
    VarRef,
)

Dialect = Literal["published", "repo"]


@dataclass(slots=True)
class Compiled:
    solver: z3.Solver
    tracks: list[str]
    final: z3.ArithRef | None
    skipped: list[str] = field(default_factory=list)


class NestedOperand(ValueError):
    pass


_Num = int | float
_Term = Any  # z3.ArithRef | int | float; z3's stubs do not type the operator overloads


def _to_num(value: float, prefer_real: bool) -> _Num:
    """[repo] `_to_num`: float for a Real context, else int when integral."""
    return value if prefer_real else (int(value) if value.is_integer() else value)


def _apply(op: str, left: _Term, right: _Term) -> _Term:
    if op == "add":
        return left + right
    if op == "sub":
        return left - right
    if op == "mul":
        return left * right
    return left / right


def _const_leaves(o: Operand) -> Iterator[Const]:
    if isinstance(o, Const):
        yield o
    elif isinstance(o, BinExpr):
        yield from _const_leaves(o.left)
        yield from _const_leaves(o.right)


def compile_ir(
    ir: IR,
    ctx: z3.Context,
    *,
    dialect: Dialect,
    skip: frozenset[str] = frozenset(),
    negate: frozenset[str] = frozenset(),
    timeout_ms: int,
    allow_nested: bool = False,
) -> Compiled | None:
    """[repo] `compile_ir`; `None` when the IR has no steps at all (their `S is None`)."""
    if not ir.steps:
        return None
    var_types = ir.var_types
    any_real = any(t == "Real" for t in var_types.values())
    versions: dict[str, int] = dict.fromkeys(var_types, 0)

    def sym(name: str, ver: int) -> z3.ArithRef:
        maker = z3.Real if var_types.get(name, "Int") == "Real" else z3.Int
        return maker(f"{name}@{ver}", ctx)

    def cur(name: str) -> z3.ArithRef:
        versions.setdefault(name, 0)
        return sym(name, versions[name])

    def bump(name: str) -> z3.ArithRef:
        versions[name] = versions.get(name, 0) + 1
        return sym(name, versions[name])

    def term(o: Operand, prefer_real: bool) -> _Term:
        if isinstance(o, VarRef):
            return cur(o.var)
        if isinstance(o, Const):
            return _to_num(o.value, prefer_real)
        if not allow_nested:
            raise NestedOperand("nested operand (the authors' compiler accepts only var/const sides)")
        return _apply(o.op, term(o.left, prefer_real), term(o.right, prefer_real))

    solver = z3.Solver(ctx=ctx)
    solver.set("timeout", int(timeout_ms))
    out = Compiled(solver, [], None)

    for i, st in enumerate(ir.steps):
        if not st.track or st.track in skip:
            continue
        try:
            if isinstance(st, SkippedStep):
                lhs_target = st.op == "set_expr" and st.raw.get("var") is None
                if st.bumps is not None and not (lhs_target and dialect == "published"):
                    bump(st.bumps)
                out.skipped.append(f"steps[{i}] ({st.track}): {st.reason}")
                continue
            if isinstance(st, SetStep):
                phi = bump(st.var) == _to_num(st.value, var_types.get(st.var) == "Real")
            elif isinstance(st, UpdateStep):
                before = cur(st.var)
                target = bump(st.var)
                value = _to_num(st.value, var_types.get(st.var) == "Real")
                phi = target == _apply(st.kind, before, value)
            elif isinstance(st, SetExprStep):
                if st.target_field == "lhs" and dialect == "published":
                    out.skipped.append(f"steps[{i}] ({st.track}): set_expr target given as 'lhs' (ignored)")
                    continue
                target = bump(st.var)
                prefer = var_types.get(st.var) == "Real" or any_real
                phi = target == _apply(st.expr.op, term(st.expr.left, prefer), term(st.expr.right, prefer))
            else:
                prefer = any_real or any(
                    not c.value.is_integer() for side in (st.lhs, st.rhs) for c in _const_leaves(side)
                )
                left, right = term(st.lhs, prefer), term(st.rhs, prefer)
                phi = (
                    left == right
                    if st.op == "assert_eq"
                    else left >= right
                    if st.op == "assert_ge"
                    else left <= right
                )
                if st.track in negate:
                    phi = z3.Not(phi, ctx)
            if not z3.is_bool(phi):
                raise z3.Z3Exception("Boolean expression expected")
            solver.assert_and_track(phi, z3.Bool(st.track, ctx))
            out.tracks.append(st.track)
        except (z3.Z3Exception, ArithmeticError, NestedOperand) as e:
            out.skipped.append(f"steps[{i}] ({st.track}): {type(e).__name__}: {e}")
    if "final_answer" in var_types:
        out.final = cur("final_answer")
    return out


@dataclass(frozen=True, slots=True)
class Check:
    result: Literal["sat", "unsat", "timeout", "unknown", "error"]
    core: frozenset[str] = frozenset()


def check(solver: z3.Solver) -> Check:
    try:
        r = solver.check()
    except z3.Z3Exception:
        return Check("error")
    if r == z3.sat:
        return Check("sat")
    if r == z3.unsat:
        return Check("unsat", frozenset(str(c) for c in solver.unsat_core()))
    reason = solver.reason_unknown()
    return Check("timeout" if ("timeout" in reason or "canceled" in reason) else "unknown")
