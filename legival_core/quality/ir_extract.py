"""Deterministic extraction of the gCoT arithmetic IR from a GSM8K-style trace (beyond the paper).

The gCoT authors had an LLM write the IR of each trace. This module derives one from the text alone so
that the Z3 metrics can run on traces without an IR. It reads what the trace writes down as arithmetic:

- equation chains ``16 - 3 - 4 = 9``, ``4(12) + 12 = 48 + 12 = 60``, ``48 + 18 is 66``;
- calculator annotations ``<<16-3-4=9>>`` (the annotation is used and the duplicate text dropped);
- labelled results ``total = 21 + 12 = 33`` and assignments ``x = 5``;
- ``×``/``x``/``*``/``\\times``/``\\cdot``, ``÷``/``/``/``\\div``/``\\frac{a}{b}``, unicode minus,
  ``$18``, ``1,000``, ``20%`` (as ``20/100``), ``20% of 50``, LaTeX ``\\( \\)`` and ``\\text{...}`` units.

Each chain ``E0 = E1 = ... = En`` becomes `set_expr` steps computing every expression (binary steps
through temporaries, respecting precedence) and ``assert_eq`` steps between consecutive members. A
number equal to the *stated* result of an earlier chain is read as a reference to that chain's
*computed* variable, so the IR carries the trace's data flow and an early slip propagates as it does in
the authors' hand-made IRs. The final answer (last ``\\boxed{}``, else ``#### N``, else "answer is N",
else the last chain's stated result) becomes ``final_answer = v * 1`` for the last computed variable
whose stated value equals it, plus ``assert_eq final_answer == N`` (the form the authors' shortcut
detection removes before FAS0). Variables are `Real` when any division or non-integer appears (so
``7 / 2`` is not integer division), else `Int`. Prose arithmetic ("half of 2 is 1") is not read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from legival_core.quality.z3_ir import (
    DEFAULT_TIMEOUT_MS,
    IR,
    AssertStep,
    BinExpr,
    Const,
    Operand,
    SetExprStep,
    SetStep,
    Step,
    Variable,
    VarRef,
    parse_ir,
)
from legival_core.quality.z3_verify import record_text, verify_ir

_NUM = r"\d+(?:\.\d+)?"


# --------------------------------------------------------------------------- normalisation


def _strip_braced(text: str, command: str) -> str:
    return re.sub(r"\\" + command + r"\s*\{[^{}]*\}", " ", text)


def normalize(text: str) -> str:
    """Rewrite a trace so that arithmetic uses ASCII ``+ - * / ( ) =`` and plain numbers."""
    t = text
    t = re.sub(r"\\d?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}", r"((\1)/(\2))", t)
    t = re.sub(r"/\s*\\text\s*\{[^{}]*\}", " ", t)  # "$2/\text{egg}": a per-unit slash
    for cmd in ("text", "mathrm", "textbf", "mbox", "operatorname"):
        t = _strip_braced(t, cmd)
    t = re.sub(r"\\boxed\s*\{([^{}]*)\}", r" \1 ", t)
    t = re.sub(r"\\(?:times|cdot|ast)", " * ", t)
    t = re.sub(r"\\div", " / ", t)
    t = re.sub(r"\\(?:left|right)\b", "", t)
    t = re.sub(r"\\[()\[\]]", " ", t)
    t = t.replace("\\$", "$").replace("\\%", "%").replace("\\,", "").replace("\\!", "")
    t = re.sub(r"\\(?:approx|neq|ne|geq|leq|ge|le|Rightarrow|implies|to)\b", " ; ", t)
    t = re.sub(r"[{}]", " ", t)
    t = t.replace("×", "*").replace("·", "*").replace("∙", "*").replace("⋅", "*").replace("÷", "/")
    t = t.replace("−", "-").replace("–", "-").replace("—", " ; ")
    t = re.sub(
        r"=>|==>|⇒|->|→|≈|≠|≥|≤|>=|<=|<(?!<)|(?<!>)>", " ; ", t.replace("<<", "\x01").replace(">>", "\x02")
    )
    t = t.replace("\x01", "<<").replace("\x02", ">>")
    t = t.replace("**", " ").replace("`", " ")
    t = re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", t)
    t = re.sub(r"\$\s*(?=[\d.(])", "", t)
    t = re.sub(rf"({_NUM})\s*%\s*of\b", r"(\1/100) *", t)
    t = re.sub(rf"({_NUM})\s*%", r"(\1/100)", t)
    t = re.sub(r"(?<=[\d)])\s*[xX]\s*(?=[$(]?\d)", " * ", t)  # "3 x 7" is multiplication
    t = re.sub(r"(?<=[\d)])\s+(?:times|multiplied\s+by)\s+(?=[(]?\d)", " * ", t)
    t = re.sub(r"(?<=[\d)])\s+divided\s+by\s+(?=[(]?\d)", " / ", t)
    t = re.sub(r"(?<=[\d)])\s+plus\s+(?=[(]?\d)", " + ", t)
    t = re.sub(r"(?<=[\d)])\s+minus\s+(?=[(]?\d)", " - ", t)
    t = re.sub(r"(?<=[\d)])\s+(?:is|equals|gives|makes|becomes)\s+(?=[-(]?\d)", " = ", t)
    # unit words between a number and an operator: "9 eggs * 2", "16 eggs - 3"
    t = re.sub(rf"({_NUM})\s*(?![xyzn]\b)[A-Za-z]+(?:\s+[A-Za-z]+)?\s*(?=[*/+=]|-\s*\d)", r"\1 ", t)
    t = re.sub(rf"({_NUM})(?![xyzn]\b)[A-Za-z]+\b", r"\1", t)  # "3h", "5kg"; not "3x"
    return re.sub(r"[ \t]+", " ", t)


# --------------------------------------------------------------------------- expressions


@dataclass(frozen=True, slots=True)
class _Num:
    value: float


@dataclass(frozen=True, slots=True)
class _Sym:
    name: str


@dataclass(frozen=True, slots=True)
class _Bin:
    op: Literal["add", "sub", "mul", "div"]
    left: _Node
    right: _Node


_Node = _Num | _Sym | _Bin
_TOKEN = re.compile(rf"\s*(?:(?P<num>{_NUM})|(?P<sym>[A-Za-z_][A-Za-z_0-9]*)|(?P<op>[-+*/()]))")
_OPS: dict[str, Literal["add", "sub", "mul", "div"]] = {"+": "add", "-": "sub", "*": "mul", "/": "div"}


class _ParseError(ValueError):
    pass


def _tokens(segment: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    segment = segment.rstrip()
    while pos < len(segment):
        m = _TOKEN.match(segment, pos)
        if not m or m.end() == pos:
            raise _ParseError(segment)
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    # implicit multiplication: "4(12)", "(3)(4)", "3x"
    fixed: list[tuple[str, str]] = []
    for tok in out:
        if (
            fixed
            and (tok == ("op", "(") or tok[0] == "sym")
            and (fixed[-1][0] in ("num", "sym") or fixed[-1] == ("op", ")"))
        ):
            fixed.append(("op", "*"))
        fixed.append(tok)
    return fixed


def _parse_expr(segment: str, symbols: frozenset[str]) -> _Node:
    toks = _tokens(segment)
    pos = 0

    def peek() -> tuple[str, str] | None:
        return toks[pos] if pos < len(toks) else None

    def take() -> tuple[str, str]:
        nonlocal pos
        if pos >= len(toks):
            raise _ParseError(segment)
        pos += 1
        return toks[pos - 1]

    def expr() -> _Node:
        node = term()
        while (t := peek()) is not None and t[1] in ("+", "-"):
            take()
            node = _Bin(_OPS[t[1]], node, term())
        return node

    def term() -> _Node:
        node = unary()
        while (t := peek()) is not None and t[1] in ("*", "/"):
            take()
            node = _Bin(_OPS[t[1]], node, unary())
        return node

    def unary() -> _Node:
        t = peek()
        if t is not None and t[1] == "-":
            take()
            inner = unary()
            return _Num(-inner.value) if isinstance(inner, _Num) else _Bin("sub", _Num(0.0), inner)
        return atom()

    def atom() -> _Node:
        kind, text = take()
        if kind == "num":
            return _Num(float(text))
        if kind == "sym":
            if text not in symbols:
                raise _ParseError(text)
            return _Sym(text)
        if text == "(":
            node = expr()
            if take()[1] != ")":
                raise _ParseError(segment)
            return node
        raise _ParseError(segment)

    node = expr()
    if pos != len(toks):
        raise _ParseError(segment)
    return node


def _has_op(node: _Node) -> bool:
    return isinstance(node, _Bin)


# --------------------------------------------------------------------------- chains


_CALC = re.compile(r"<<([^<>]*)>>\s*(-?\d+(?:\.\d+)?)?")
_VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z_0-9]*$")
_LET = re.compile(r"\b(?:let|where)\s+([A-Za-z])\b", re.I)


def _chains(text: str) -> list[list[str]]:
    """Equation chains in reading order, each the list of members between ``=`` signs."""
    text = _CALC.sub(lambda m: f" ; {m.group(1)} ; ", text)
    return [line.split("=") for line in re.split(r"[\n;:,!?]|\.(?!\d)", text) if "=" in line]


@dataclass(slots=True)
class _Builder:
    steps: list[Step] = field(default_factory=list)
    names: dict[str, int] = field(default_factory=dict)
    declared: dict[str, None] = field(default_factory=dict)
    symbols: dict[str, str] = field(default_factory=dict)  # user symbol -> IR variable
    stated: dict[float, str] = field(default_factory=dict)  # stated value -> computed variable
    computed_values: list[tuple[str, float]] = field(default_factory=list)
    real: bool = False
    n_track: int = 0

    def track(self) -> str:
        self.n_track += 1
        return f"s{self.n_track}"

    def fresh(self, base: str) -> str:
        base = re.sub(r"\W", "_", base.lower()) or "v"
        if base == "final_answer":
            base = "final_answer_label"
        n = self.names.get(base, 0) + 1
        self.names[base] = n
        name = base if (n == 1 and base != "v") else f"{base}{n}"
        self.declared[name] = None
        return name

    def operand(self, node: _Node, link: bool, target: str | None = None) -> Operand:
        if isinstance(node, _Num):
            if not node.value.is_integer():
                self.real = True
            if link and node.value in self.stated:
                return VarRef(self.stated[node.value])
            return Const(node.value)
        if isinstance(node, _Sym):
            return VarRef(self.symbols[node.name])
        if node.op == "div":
            self.real = True
        left = self.operand(node.left, link)
        right = self.operand(node.right, link)
        var = target or self.fresh("v")
        self.steps.append(SetExprStep(self.track(), var, BinExpr(node.op, left, right)))
        return VarRef(var)

    def _parse(self, text: str) -> _Node | None:
        try:
            return _parse_expr(text, frozenset(self.symbols))
        except _ParseError:
            return None

    def _longest(self, text: str, suffix: bool) -> _Node | None:
        parts = text.split()
        spans = (
            [parts[k:] for k in range(len(parts))]
            if suffix
            else [parts[: len(parts) - k] for k in range(len(parts))]
        )
        for span in spans:
            node = self._parse(" ".join(span))
            if node is not None:
                return node
        return None

    def chain(self, members: list[str]) -> None:
        """One ``E0 = E1 = ... = En`` chain; prose before E0 and after En is trimmed, a word right
        before the first ``=`` names the result (``total = 21 + 12``, ``x = 5``)."""
        if len(members) < 2:
            return
        label: str | None = None
        nodes: list[_Node] = []
        rest: list[str] = []
        first = self._longest(members[0], suffix=True)
        words = members[0].split()
        if isinstance(first, _Sym) and words and words[-1] == first.name:
            first = None  # "x = 5" again: a new assignment of x
        if first is None:
            if words and _VAR_NAME.match(words[-1]):
                label = words[-1]
            else:
                return
        else:
            nodes.append(first)
        for i, m in enumerate(members[1:], start=1):
            node = self._parse(m) if i < len(members) - 1 else self._longest(m, suffix=False)
            if node is None:
                # "= 7000 and 7000 / 4 = 1750": this chain ends in the prefix, the next starts after it
                node = self._longest(m, suffix=False)
                if node is not None:
                    nodes.append(node)
                rest = [m, *members[i + 1 :]]
                break
            nodes.append(node)
        self._emit(label, nodes)
        if len(rest) > 1:
            self.chain(rest)

    def _emit(self, label: str | None, nodes: list[_Node]) -> None:
        if label is not None and len(nodes) == 1 and isinstance(nodes[0], _Num):
            var = self.fresh(label)
            if len(label) == 1:
                self.symbols[label] = var
            self.steps.append(SetStep(self.track(), var, nodes[0].value))
            if not nodes[0].value.is_integer():
                self.real = True
            return
        if len(nodes) < 2 and not (label is not None and nodes and _has_op(nodes[0])):
            return
        if not any(_has_op(n) for n in nodes):
            return
        sides: list[Operand] = []
        for i, node in enumerate(nodes):
            target = self.fresh(label) if (i == 0 and label and _has_op(node)) else None
            sides.append(self.operand(node, link=True, target=target))
        for a, b in zip(sides, sides[1:], strict=False):
            if isinstance(a, Const) and isinstance(b, Const):
                continue
            self.steps.append(AssertStep(self.track(), "assert_eq", a, b))
        computed = next(
            (s for s, n in zip(sides, nodes, strict=False) if _has_op(n) and isinstance(s, VarRef)), None
        )
        value = next((n.value for n in reversed(nodes) if isinstance(n, _Num)), None)
        if computed is not None and value is not None:
            self.stated[value] = computed.var
            self.computed_values.append((computed.var, value))
        if label is not None and len(label) == 1 and computed is not None:
            self.symbols[label] = computed.var


def final_answer_from_text(text: str) -> float | None:
    """The trace's stated final answer: last ``\\boxed{}`` number, else ``#### N``, else "answer is N"."""
    for pattern in (
        r"\\boxed\s*\{\s*\\?\$?\s*(-?[\d,]*\.?\d+)",
        r"####\s*\$?\s*(-?[\d,]*\.?\d+)",
        r"answer\s*(?:is|:|=)?\s*(?:\*\*)?\s*\\?\$?\s*(-?[\d,]*\.?\d+)",
    ):
        found = re.findall(pattern, text, flags=re.I)
        if found:
            try:
                return float(found[-1].replace(",", ""))
            except ValueError:
                continue
    return None


def extract_ir(reasoning: str) -> IR | None:
    """Derive the published-format IR of a trace; `None` when it writes no arithmetic chain."""
    if not reasoning or not reasoning.strip():
        return None
    b = _Builder()
    text = normalize(reasoning)
    for sym in _LET.findall(text):
        if sym not in ("a", "A", "I") and sym not in b.symbols:
            b.symbols[sym] = b.fresh(sym)
    for members in _chains(text):
        b.chain(members)
    if not b.computed_values:
        return None
    answer = final_answer_from_text(reasoning)
    if answer is None:
        answer = b.computed_values[-1][1]
    source = next((var for var, v in reversed(b.computed_values) if v == answer), None)
    if source is None:
        source = next(
            (s.var for s in reversed(b.steps) if isinstance(s, SetStep) and s.value == answer), None
        )
    if not answer.is_integer():
        b.real = True
    if source is not None:
        b.steps.append(SetExprStep(b.track(), "final_answer", BinExpr("mul", VarRef(source), Const(1.0))))
    b.steps.append(AssertStep(b.track(), "assert_eq", VarRef("final_answer"), Const(answer)))
    vtype: Literal["Int", "Real"] = "Real" if b.real else "Int"
    variables = tuple(Variable(n, vtype) for n in [*b.declared, "final_answer"])
    ir = IR(variables, tuple(b.steps))
    return parse_ir(ir.to_dict())  # guarantees the published format round-trips


# --------------------------------------------------------------------------- comparison


def compare_with_published(
    records: Iterable[Mapping[str, Any]], *, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> dict[str, Any]:
    """Extract an IR from each published record's trace (`data.gcot`) and compare its FAS0 with that of
    the authors' IR (both with the answer found by the authors' rule, and the record text as fallback).

    Returns counts: `n`, `extracted`, `success_rate`, `fas0_comparable` (both FAS0 defined),
    `fas0_agree`, `fas0_agreement`, plus per-record rows under `rows`.
    """
    rows: list[dict[str, Any]] = []
    for rec in records:
        data = rec.get("data") if isinstance(rec.get("data"), Mapping) else {}
        text = str((data or {}).get("gcot") or rec.get("reasoning") or "")
        fallback = record_text(rec)
        published = verify_ir(
            parse_ir(rec["ir"], lenient=True), fallback_text=fallback, timeout_ms=timeout_ms
        )
        ext = extract_ir(text)
        mine = verify_ir(ext, fallback_text=fallback, timeout_ms=timeout_ms) if ext is not None else None
        rows.append(
            {
                "extracted": ext is not None,
                "n_steps": len(ext.steps) if ext is not None else 0,
                "fas0_published": published.fas0,
                "fas0_extracted": mine.fas0 if mine is not None else None,
                "acs_published": published.acs,
                "acs_extracted": mine.acs if mine is not None else None,
                "answer_published": published.answer,
                "answer_extracted": mine.answer if mine is not None else None,
            }
        )
    n = len(rows)
    extracted = sum(r["extracted"] for r in rows)
    comparable = [r for r in rows if r["fas0_published"] is not None and r["fas0_extracted"] is not None]
    agree = sum(r["fas0_published"] == r["fas0_extracted"] for r in comparable)
    return {
        "n": n,
        "extracted": extracted,
        "success_rate": extracted / n if n else None,
        "fas0_comparable": len(comparable),
        "fas0_agree": agree,
        "fas0_agreement": agree / len(comparable) if comparable else None,
        "fas0_agreement_over_all": agree / n if n else None,
        "rows": rows,
    }
