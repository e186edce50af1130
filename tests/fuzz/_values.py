"""JSON-like values, and random edits of a real document (a published IR, an example spec)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import strategies as st

from tests.fuzz._text import ANY_CHAR

BIG = 10**5000
"""More digits than Python turns into text (`sys.get_int_max_str_digits`): `repr` raises ValueError."""


def huge(sign: int) -> int:
    return sign * BIG  # built by a function: Hypothesis cannot print a strategy that holds BIG itself


SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from((1, -1)).map(huge), st.sampled_from((10**400, 2**63)),
    st.floats(allow_nan=True, allow_infinity=True), st.text(alphabet=ANY_CHAR, max_size=8),
    st.sampled_from(("", " ", "~", "~nobody_here/x", "..", "/", "a\x00b", "1e400", "nan", "true", "null")),
)


def json_values(keys: st.SearchStrategy[str], leaves: st.SearchStrategy[Any] = SCALARS) -> st.SearchStrategy[Any]:
    """Nested lists and mappings (keys biased towards `keys`) of any leaves."""
    return st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.one_of(keys, st.text(alphabet=ANY_CHAR, max_size=4)), inner, max_size=5),
        ),
        max_leaves=25,
    )


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[Any], values: st.SearchStrategy[Any]) -> Any:
    """A value with up to three random edits: a sub-value replaced by any JSON value, a key dropped, a
    list item duplicated."""
    obj = copy.deepcopy(draw(base))
    for _ in range(draw(st.integers(0, 3))):
        path: list[Any] = []
        node = obj
        while isinstance(node, dict | list) and node and draw(st.integers(0, 3)):
            key = draw(st.sampled_from(sorted(node, key=repr) if isinstance(node, dict) else range(len(node))))
            path.append(key)
            node = node[key]
        if not path:
            continue
        parent = obj
        for key in path[:-1]:
            parent = parent[key]
        edit = draw(st.sampled_from(("replace", "drop", "duplicate")))
        if edit == "replace":
            parent[path[-1]] = draw(values)
        elif edit == "drop":
            del parent[path[-1]]
        elif isinstance(parent, list):
            parent.append(parent[path[-1]])
    return obj
