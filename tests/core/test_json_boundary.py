"""JSON from outside is read through one boundary (`legival_core/untrusted_json.py`, docs/security.md).

`test_every_json_parse_goes_through_the_boundary` walks the syntax tree of every production module and
lists each JSON parse: `json.load`/`json.loads`/`JSONDecoder`/`raw_decode` (however `json` was imported),
any use of `ijson`, `orjson`, `ujson`, `simplejson`, pydantic's `from_json`/`model_validate_json`, and the
dataframe readers `read_json`/`read_ndjson`/`scan_ndjson`. A parse is allowed only in the boundary
module, or where `INTERNAL` lists it (module, enclosing function, count) with the reason no user writes
that JSON: a new reader of a user's file that calls `json.loads` itself fails here, naming the line.
`test_the_scan_finds_a_bypass_however_it_is_written` shows the scan fires, on a copy of a module with a
bypass inserted.
"""

from __future__ import annotations

import ast
import shutil
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import REPO

PRODUCTION = ("legival_core", "legival", "flows", "tasks", "deployments")
BOUNDARY = "legival_core/untrusted_json.py"

STORE = "JSON that Legi-Val itself wrote into the store (json.dumps at commit), read back"
INTERNAL: dict[tuple[str, str], tuple[int, str]] = {
    # (module, enclosing function): (parses, why no user writes that JSON)
    ("legival_core/backends/vllm_bridge.py", "VllmSubprocessBackend._read"):
        (1, "replies of our own vLLM worker process, over its pipe"),
    ("legival_core/backends/vllm_worker.py", "_serve"): (1, "requests of the vLLM bridge, our parent process"),
    ("legival_core/backends/vllm_worker.py", "main"): (1, "the options our parent process put on the worker's argv"),
    ("legival_core/generation/engines.py", "ChatEndpointEngine._one"):
        (1, "the prompt spec the generate stage serialised (json.dumps) for this call"),
    ("legival_core/grading/groups.py", "_loads"):
        (2, "a list inside an answer's text, not a file: spans cut by its own scanner, which tracks nesting; "
            "every error (RecursionError included) is caught and read as no answer"),
    ("legival_core/grading/groups.py", "parse_groups"): (1, "the canonical groups JSON it wrote itself"),
    ("legival_core/readers/trace_records.py", "problem_of_row"): (2, STORE + ": a problem's choices and meta"),
    ("legival_core/judges/gemini.py", "GeminiJudge._batch_responses"):
        (1, "a batch result file downloaded from Google's API (an outside service, not a user's file); any "
            "failure of a line is caught and becomes that unit's error"),
    ("legival_core/plan/ingest.py", "_agree"): (1, STORE + ": a problem's choices"),
    ("legival_core/quality/clarity.py", "ClarityReference.from_json"): (1, "the clarity reference it computed (to_json)"),
    ("legival_core/quality/informativeness.py", "_byte_level_without_prefix_space"):
        (1, "a shipped tokenizer's own JSON, from the tokenizers library's to_str()"),
    ("legival_core/reports/compute/coverage.py", "reason_of"): (1, STORE + ": a row's detail"),
    ("legival_core/reports/compute/trace_export.py", "_clarity_raw"): (1, STORE + ": a clarity row's detail"),
    ("legival_core/reports/render/dashboard.py", "_flag_list"): (1, STORE + ": a judge result's flagged steps"),
    ("legival_core/runs/diff.py", "load_snapshot"): (1, STORE + ": a run record"),
    ("legival_core/runs/record.py", "producer_versions"): (1, STORE + ": a metric's params"),
    ("legival_core/stages/ingest.py", "find_conflicts"): (1, STORE + ": a problem's choices"),
    ("legival_core/stages/judge.py", "stored_judge_counts"): (1, STORE + ": flagged steps"),
    ("legival_core/stages/judge_batch.py", "pending_trace_ids"): (1, STORE + ": a submitted batch's trace ids"),
    ("legival_core/stages/judge_batch.py", "ResumeBatchesStage.plan"): (1, STORE + ": a batch's trace ids"),
    ("legival_core/stages/transfer_traces.py", "_build_transfer_traces"): (1, STORE + ": a problem's choices"),
    ("legival_core/store/study.py", "study_row"): (1, STORE + ": a study's config"),
    ("legival/commands/runs.py", "runs"): (2, STORE + ": a run record's counts and teachers"),
    ("tasks/local_ray.py", "_await_address"): (1, "the ready line our own Ray helper process prints"),
}

_JSON_CALLS = {"loads", "load", "JSONDecoder", "raw_decode"}
_PARSERS = {"ijson", "orjson", "ujson", "simplejson", "pydantic_core"}
"""Any function of these called is a parse (`import ijson` for its error type alone is not)."""
_ANYWHERE = {"raw_decode", "model_validate_json", "read_json", "read_ndjson", "scan_ndjson"}


def json_parses(source: str) -> list[tuple[int, str, str]]:
    """(line, enclosing function's qualified name or '<module>', what) of every JSON parse in `source`."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> the json or parser module it is bound to
    direct: dict[str, str] = {}  # local name -> "module.function" imported from one

    class Visit(ast.NodeVisitor):
        def __init__(self) -> None:
            self.stack: list[str] = []
            self.found: list[tuple[int, str, str]] = []

        def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

        visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped  # noqa: N815

        def visit_Import(self, node: ast.Import) -> None:
            for a in node.names:
                top = a.name.split(".")[0]
                if top == "json" or top in _PARSERS:
                    modules[a.asname or top] = top

        def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
            top = (node.module or "").split(".")[0]
            for a in node.names:
                if (top == "json" and a.name in _JSON_CALLS) or top in _PARSERS:
                    direct[a.asname or a.name] = f"{node.module}.{a.name}"

        def visit_Call(self, node: ast.Call) -> None:
            f, what = node.func, None
            if isinstance(f, ast.Attribute):
                base = f.value.id if isinstance(f.value, ast.Name) else None
                if base in modules and (modules[base] in _PARSERS or f.attr in _JSON_CALLS):
                    what = f"{base}.{f.attr}"
                elif f.attr in _ANYWHERE:
                    what = f".{f.attr}()"
            elif isinstance(f, ast.Name) and f.id in direct:
                what = direct[f.id]
            if what is not None:
                self.found.append((node.lineno, ".".join(self.stack) or "<module>", what))
            self.generic_visit(node)

    v = Visit()
    v.visit(tree)
    return v.found


def bypasses(root: Path) -> list[str]:
    """Every JSON parse under `root`'s production packages that is neither in the boundary nor listed."""
    out: list[str] = []
    seen: Counter[tuple[str, str]] = Counter()
    for pkg in PRODUCTION:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            if rel == BOUNDARY or "__pycache__" in path.parts:
                continue
            for line, scope, what in json_parses(path.read_text(encoding="utf-8")):
                seen[(rel, scope)] += 1
                allowed = INTERNAL.get((rel, scope), (0, ""))[0]
                if seen[(rel, scope)] > allowed:
                    out.append(f"{rel}:{line}: {what} in {scope} (read it with legival_core.untrusted_json, or "
                               "list it in INTERNAL with the reason no user writes that JSON)")
    return out


def test_every_json_parse_goes_through_the_boundary() -> None:
    assert bypasses(REPO) == []


def test_the_internal_list_holds_no_stale_entry() -> None:
    """Each listed place still parses JSON as often as listed: the list never outlives the code."""
    counts: Counter[tuple[str, str]] = Counter()
    for rel in {rel for rel, _ in INTERNAL}:
        for _, scope, _ in json_parses((REPO / rel).read_text(encoding="utf-8")):
            counts[(rel, scope)] += 1
    assert {k: counts[k] for k in INTERNAL} == {k: n for k, (n, _) in INTERNAL.items()}


@pytest.mark.parametrize("bypass", [
    "import json\ndef read(p):\n    return json.loads(p.read_text())\n",
    "import json as j\ndef read(p):\n    return j.load(p.open())\n",
    "from json import loads as parse\ndef read(p):\n    return parse(p.read_text())\n",
    "import json\ndef read(s):\n    return json.JSONDecoder().raw_decode(s, 0)\n",
    "def read(f):\n    import ijson\n    return list(ijson.items(f, 'x.item'))\n",
    "import orjson\ndef read(b):\n    return orjson.loads(b)\n",
    "def read(p):\n    import polars as pl\n    return pl.read_ndjson(p)\n",
    "def read(model, s):\n    return model.model_validate_json(s)\n",
])
def test_the_scan_finds_a_bypass_however_it_is_written(tmp_path: Path, bypass: str) -> None:
    copy = tmp_path / "repo"
    for pkg in PRODUCTION:
        shutil.copytree(REPO / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    assert bypasses(copy) == []
    target = copy / "legival_core" / "study" / "label_studio.py"
    target.write_text(target.read_text(encoding="utf-8") + "\n\n" + bypass, encoding="utf-8")
    found = bypasses(copy)
    assert found and all(f.startswith("legival_core/study/label_studio.py:") for f in found), found
    assert all(" in read (read it with legival_core.untrusted_json" in f for f in found)
