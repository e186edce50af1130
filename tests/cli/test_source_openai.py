"""`legival ingest --from openai`: OpenAI Batch API output files and saved chat completions
(legival_core/readers/sources/openai_batch.py).

How the inputs were made (the `made` fixture, once per module). There is no offline OpenAI batch tool,
and the `openai` SDK is not installed here, so a batch was RUN the way a batch runner runs one: the
batch input file (`requests.jsonl`: one `{"custom_id", "method": "POST", "url": "/v1/chat/completions",
"body": {"model", "messages"[, "max_tokens"]}}` line per request, built from 10 real traces of
examples/data/gsm8k_gpt-oss-120b_200.jsonl, some custom_ids being the GSM8K problem ids and some not, some
user messages a prompt template around the question) was POSTed request by request with httpx to this
project's fake OpenAI-compatible server (tests/fakes/openai_server.py), put behind a reasoning parser as
vLLM serves a reasoning model (`ReasoningServer` below: the teacher's real output `<think>reasoning
</think>answer` is returned with the thinking section in `message.reasoning_content`, or `message.reasoning`
on a second server, and a reply longer than `max_tokens` is cut there with `finish_reason: "length"`).
Each real HTTP response became one line of the documented Batch API output format, `{"id", "custom_id",
"response": {"status_code", "request_id", "body"}, "error": null}` (`id` and `request_id` are the runner's).
The failed requests were made the same way from real failures: a 400 the server answered (its error
body kept), a request to an endpoint that refused the connection (`"response": null, "error": {"code",
"message"}`), and a reply with no thinking section (`reasoning_content: null`). The saved chat
completions are the same response bodies, one per line, with their request's `messages` (plain JSONL) or
bare (gzip, matched to `--requests` by position); `batch_out.jsonl.zst` is the output file compressed.
"""

from __future__ import annotations

import gzip
import json
import socket
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import zstandard

from legival_core.datasets.base import grader_key
from legival_core.store import Store
from tests._cli import Ran, legival
from tests._sql import rows
from tests.conftest import EXAMPLES
from tests.fakes import Canned, Recorded
from tests.fakes.openai_server import FakeOpenAI

TEMPLATE = "Solve the problem. Put the final answer in \\boxed{{}}.\n\nProblem: {question}"
CUT_AT = 8
"""The `max_tokens` of the request whose reply is cut (the server counts words): inside its reasoning."""


class ReasoningServer(FakeOpenAI):
    """The fake OpenAI server behind a reasoning parser, as vLLM serves a reasoning model with
    `--reasoning-parser`: the reply's `<think>` section goes to `message[key]` and the rest stays the
    `content` (null when the section never closes); a reply of more words than the request's
    `max_tokens` is cut there, with `finish_reason: "length"`. No `<think>`: `message[key]` is null."""

    def __init__(self, replies: Callable[[str], str], key: str) -> None:
        super().__init__(lambda body: Canned(text=replies(body["messages"][-1]["content"])))
        self.key = key

    def route(self, rec: Recorded) -> tuple[int, dict[str, str], bytes]:
        status, headers, payload = super().route(rec)
        if status != 200:
            return status, headers, payload
        obj = json.loads(payload)
        choice = obj["choices"][0]
        text = choice["message"]["content"]
        words = text.split(" ")
        if rec.body.get("max_tokens") and len(words) > rec.body["max_tokens"]:
            text, choice["finish_reason"] = " ".join(words[: rec.body["max_tokens"]]), "length"
        reasoning, content = None, text
        if "<think>" in text:
            reasoning, closed, after = text.split("<think>", 1)[1].partition("</think>")
            content = after if closed else None
        choice["message"] = {"role": "assistant", "content": content, self.key: reasoning}
        return self.json_response(200, obj)


def run_batch(requests: list[dict[str, Any]], base_url: Callable[[dict[str, Any]], str]) -> list[dict[str, Any]]:
    """What a batch runner does: each request POSTed, each real response (or failure) one output line."""
    out = []
    with httpx.Client(timeout=30) as client:
        for n, req in enumerate(requests):
            line: dict[str, Any] = {"id": f"batch_req_{n:04d}", "custom_id": req["custom_id"]}
            try:
                r = client.post(base_url(req) + req["url"], json=req["body"])
            except httpx.TransportError as e:
                out.append(line | {"response": None, "error": {"code": "connection_error", "message": str(e)}})
                continue
            out.append(line | {"response": {"status_code": r.status_code, "request_id": f"req_{n:04d}",
                                            "body": r.json()}, "error": None})
    return out


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


@dataclass(frozen=True)
class Made:
    dir: Path
    problems: Path
    requests: Path
    batch: Path
    traces: list[dict[str, Any]]
    """The real traces the requests were answered with (by request)."""
    failed: Path


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Made:
    d = tmp_path_factory.mktemp("openai")
    problems = d / "test.jsonl"  # GSM8K's own format; named test.jsonl: ids gsm8k-test-N
    problems.write_text("".join((EXAMPLES / "gsm8k_test.jsonl").read_text().splitlines(keepends=True)[:20]))
    traces = [json.loads(x) for x in (EXAMPLES / "gsm8k_gpt-oss-120b_200.jsonl").read_text().splitlines()[:10]]
    by_question = {t["problem"]: t for t in traces}

    def reply(user: str) -> str:
        t = next((t for q, t in by_question.items() if q in user), None)
        return "The answer is \\boxed{7}." if t is None else f"<think>{t['reasoning']}</think>{t['response']}"

    requests: list[dict[str, Any]] = []
    for i, t in enumerate(traces):
        body: dict[str, Any] = {"model": t["model"], "messages": [
            {"role": "system", "content": "You are a careful mathematician."},
            {"role": "user", "content": TEMPLATE.format(question=t["problem"]) if i % 4 == 3 else t["problem"]}]}
        if i == 9:
            body["max_tokens"] = CUT_AT
        requests.append({"custom_id": t["problem_id"] if i % 2 == 0 else f"request-{i}", "method": "POST",
                         "url": "/v1/chat/completions", "body": body})
    q11 = json.loads((EXAMPLES / "gsm8k_test.jsonl").read_text().splitlines()[11])["question"]
    failing: list[dict[str, Any]] = [{"custom_id": cid, "method": "POST", "url": "/v1/chat/completions",
                "body": {"model": "openai/gpt-oss-120b", "messages": [{"role": "user", "content": q}]}}
               for cid, q in (("bad-400", traces[0]["problem"]), ("bad-down", traces[1]["problem"]),
                              ("gsm8k-test-11", q11))]
    with socket.socket() as s:  # a port nothing listens on: the connection is refused
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}"
    with ReasoningServer(reply, "reasoning_content") as vllm, ReasoningServer(reply, "reasoning") as other:
        out = run_batch(requests, lambda r: other.url if r["custom_id"] in ("gsm8k-test-2", "request-5") else vllm.url)
        vllm.script.append(Canned.error(400, message="This model's maximum context length is 32768 tokens."))
        bad = run_batch(failing + requests[0:3:2], lambda r: closed if r["custom_id"] == "bad-down" else vllm.url)
    _jsonl(d / "requests.jsonl", requests)
    batch = _jsonl(d / "batch_out.jsonl", out)
    (d / "batch_out.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(batch.read_bytes()))
    bodies = [line["response"]["body"] for line in out]
    _jsonl(d / "completions.jsonl", [b | {"messages": r["body"]["messages"]} for b, r in zip(bodies, requests, strict=True)])
    (d / "completions.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(b) + "\n" for b in bodies).encode()))
    _jsonl(d / "failed_requests.jsonl", failing + requests[0:3:2])
    return Made(d, problems, d / "requests.jsonl", batch, traces, _jsonl(d / "failed.jsonl", bad))


def _ingest(db: Path, *args: str | Path, made: Made | None = None) -> Ran:
    more = ("--dataset", "gsm8k", "--problems", str(made.problems)) if made is not None else ()
    return legival("ingest", *map(str, args), *more, "--db", str(db))


def _stored(db: Path) -> list[tuple[Any, ...]]:
    with Store(db, read_only=True) as s:
        return rows(s, "SELECT t.trace_id, t.teacher, t.dataset, t.problem_id, p.question, p.gold, t.reasoning, "
                       "t.answer_text, t.truncated FROM traces t JOIN problems p USING (dataset, problem_id) "
                       "ORDER BY t.trace_id")


def _gsm8k(made: Made) -> dict[str, tuple[str, str]]:
    from legival_core.datasets.base import get_dataset

    return {p.problem_id: (p.question, p.gold) for p in get_dataset("gsm8k").load(made.problems)}


def test_a_batch_output_is_stored_as_it_holds_it_field_by_field(made: Made, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    r = _ingest(db, made.batch, "--requests", made.requests, made=made)
    assert r.returncode == 0, r.stderr
    assert f"{made.batch}: read as openai (--from auto)" in r.stderr
    assert r.summary()["new_traces"] == 10 and r.summary()["files"][0]["format"] == "openai"
    stored = {t[3]: t for t in _stored(db)}
    problems = _gsm8k(made)
    lines = [json.loads(x) for x in made.batch.read_text().splitlines()]
    keys = set()
    for line, trace in zip(lines, made.traces, strict=True):
        body = line["response"]["body"]
        (choice,) = body["choices"]
        msg = choice["message"]
        keys.add(next(k for k in ("reasoning_content", "reasoning") if k in msg))
        _tid, teacher, dataset, pid, question, gold, reasoning, answer, truncated = stored[trace["problem_id"]]
        assert (teacher, dataset, (question, gold)) == (body["model"], "gsm8k", problems[pid])
        assert (reasoning, answer, truncated) == (msg.get("reasoning_content") or msg.get("reasoning"),
                                                  msg["content"] or "", choice["finish_reason"] == "length")
    assert keys == {"reasoning_content", "reasoning"}
    assert sum(t[8] for t in stored.values()) == 1  # the request cut at max_tokens
    with Store(db, read_only=True) as s:  # graded by our grader, every one
        assert rows(s, "SELECT count(DISTINCT trace_id) FROM grades WHERE grader = ?", [grader_key("gsm8k")]) == [(10,)]
    again = _ingest(db, made.batch, "--requests", made.requests, made=made)
    assert again.returncode == 0 and again.summary()["new_traces"] == 0 and again.summary()["already_stored"] == 10


def _reference(made: Made, tmp_path: Path) -> Path:
    """The same traces as Legi-Val's own JSONL, from the real traces the server answered with (the one
    cut at max_tokens cut the same way), the problems from GSM8K's file."""
    problems = _gsm8k(made)
    recs = []
    for i, t in enumerate(made.traces):
        rec = {"model": t["model"], "dataset": "gsm8k", "problem_id": t["problem_id"],
               "problem": problems[t["problem_id"]][0], "gold_answer": problems[t["problem_id"]][1],
               "reasoning": t["reasoning"], "response": t["response"]}
        if i == 9:
            cut = " ".join(f"<think>{t['reasoning']}".split(" ")[:CUT_AT])
            assert len(cut) < len(t["reasoning"])
            rec |= {"reasoning": cut.removeprefix("<think>"), "response": "", "truncated": True}
        recs.append(rec)
    db = tmp_path / "ref.duckdb"
    assert _ingest(db, _jsonl(tmp_path / "ref.jsonl", recs)).returncode == 0
    return db


def test_our_jsonl_and_the_batch_give_identical_metric_rows(made: Made, tmp_path: Path) -> None:
    ref, db = _reference(made, tmp_path), tmp_path / "s.duckdb"
    assert _ingest(db, made.batch, "--requests", made.requests, made=made).returncode == 0
    assert _stored(db) == _stored(ref)
    metrics = []
    for store in (ref, db):
        eff = legival("efficiency", "--db", str(store))
        assert eff.returncode == 0, eff.stderr
        with Store(store, read_only=True) as s:
            metrics.append(rows(s, "SELECT trace_id, metric, params, code_version, value, method, status, detail "
                                   "FROM trace_metrics ORDER BY ALL"))
    assert len(metrics[0]) >= 30 and metrics[0] == metrics[1]


@pytest.mark.parametrize("how", ["zst", "completions+messages", "bare.gz+requests", "by id, no requests"])
def test_every_accepted_shape_stores_the_same_traces(made: Made, tmp_path: Path, how: str) -> None:
    ref = _reference(made, tmp_path)
    d = made.dir
    args: tuple[str | Path, ...] = {
        "zst": (d / "batch_out.jsonl.zst", "--requests", made.requests),
        "completions+messages": (d / "completions.jsonl",),
        "bare.gz+requests": (d / "completions.jsonl.gz", "--from", "openai-batch", "--requests", made.requests),
        "by id, no requests": (made.batch,),
    }[how]
    r = _ingest(tmp_path / "s.duckdb", *args, made=made)
    if how == "by id, no requests":  # only custom_ids that are problem ids find their problem
        r.error(f"{made.batch}:2: field 'custom_id': request 'request-1': no problem of --problems "
                f"{made.problems} has problem_id 'request-1'")
        return
    assert r.returncode == 0, r.stderr
    assert r.summary()["files"][0]["format"] == "openai"
    assert _stored(tmp_path / "s.duckdb") == _stored(ref)


def test_failed_requests_are_counted_skips_and_a_bad_answer_a_bad_line(made: Made, tmp_path: Path) -> None:
    """A request that failed (HTTP 400, `error` set) holds no trace: skipped and counted with its reason,
    no `--skip-bad` needed; a completion without its reasoning is a bad line like any other."""
    db = tmp_path / "s.duckdb"
    failed = [
        f"{made.failed}:1: field 'response.status_code': request 'bad-400' failed with HTTP 400 (This model's "
        "maximum context length is 32768 tokens.): no trace",
        f"{made.failed}:2: field 'error': request 'bad-down' failed (connection_error: ",
    ]
    bad = (f"{made.failed}:3: field 'response.body.choices[0].message.reasoning_content': request 'gsm8k-test-11': "
           "is null and the content has no thinking section (<think>, [THINK], harmony)")
    _ingest(db, made.failed, made=made).error(bad)
    assert not db.exists() or not _stored(db)
    r = _ingest(db, made.failed, "--skip-bad", made=made)
    assert r.returncode == 0, r.stderr
    assert (r.summary()["new_traces"], r.summary()["bad_lines"], r.summary()["skipped"]) == (2, 1, 2)
    skipped = [ln for ln in r.stderr.splitlines() if ln.startswith("skipped: ")]
    assert len(skipped) == 3 and all(any(reason in line for line in skipped) for reason in [*failed, bad])


def _damaged(line: dict[str, Any], how: str) -> str:
    body = line["response"]["body"]
    msg = body["choices"][0]["message"]
    if how == "cut":
        return json.dumps(line)[:-30]
    {"no choices": lambda: body.update(choices=[]),
     "content 5": lambda: msg.update(content=5),
     "custom_id 7": lambda: line.update(custom_id=7),
     "no model": lambda: body.pop("model"),
     "no message": lambda: body["choices"][0].pop("message"),
     "response text": lambda: line.update(response="ok"),
     "no response": lambda: line.update(response=None),
     "status 500": lambda: line["response"].update(status_code=500)}[how]()  # a failed request: a skip
    return json.dumps(line)


@pytest.mark.parametrize(("how", "expect"), [
    ("cut", "2: field '<json>': malformed JSON"),
    ("no choices", "2: field 'response.body.choices': request 'request-1': expected a non-empty list of choices"),
    ("content 5", "2: field 'response.body.choices[0].message.content': request 'request-1': expected text or null, "
                  "got 5"),
    ("custom_id 7", "2: field 'custom_id': expected a non-empty string, got 7"),
    ("no model", "2: field 'response.body.model': expected the model's name (or give --teacher NAME)"),
    ("no message", "2: field 'response.body.choices[0].message': request 'request-1': expected the assistant's message"),
    ("response text", "2: field '<record>': neither an OpenAI Batch API output line (custom_id, response) nor a "
                      "chat.completion object"),
    ("no response", "2: field 'response': request 'request-1': no response and no error"),
])
def test_a_damaged_line_is_named_and_skip_bad_skips_it(made: Made, tmp_path: Path, how: str, expect: str) -> None:
    lines = made.batch.read_text().splitlines()
    lines[1] = _damaged(json.loads(lines[1]), how)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    db = tmp_path / "s.duckdb"
    _ingest(db, bad, "--requests", made.requests, made=made).error(f"{bad}:{expect}")
    r = _ingest(db, bad, "--requests", made.requests, "--skip-bad", made=made)
    assert r.returncode == 0, r.stderr
    assert r.summary()["new_traces"] == 9 and r.summary()["bad_lines"] == 1


def test_a_failed_status_is_a_counted_skip_not_a_bad_line(made: Made, tmp_path: Path) -> None:
    lines = made.batch.read_text().splitlines()
    lines[1] = _damaged(json.loads(lines[1]), "status 500")
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines) + "\n")
    r = _ingest(tmp_path / "s.duckdb", bad, "--requests", made.requests, made=made)
    assert r.returncode == 0, r.stderr
    assert (r.summary()["new_traces"], r.summary()["bad_lines"], r.summary()["skipped"]) == (9, 0, 1)
    assert f"skipped: {bad}:2: field 'response.status_code': request 'request-1' failed with HTTP 500: no trace" \
        in r.stderr


def test_each_choice_of_a_line_is_a_trace(made: Made, tmp_path: Path) -> None:
    """A request with n=2 answers with two choices (a copy of a real line given a second real choice)."""
    first, other = (json.loads(x) for x in made.batch.read_text().splitlines()[:2])
    second = other["response"]["body"]["choices"][0] | {"index": 1}
    first["response"]["body"]["choices"].append(second)
    db = tmp_path / "s.duckdb"
    r = _ingest(db, _jsonl(tmp_path / "n2.jsonl", [first]), made=made)
    assert r.returncode == 0 and r.summary()["new_traces"] == 2, r.stderr
    with Store(db, read_only=True) as s:
        got = rows(s, "SELECT problem_id, reasoning, json_extract(provenance, '$.choice') FROM traces ORDER BY 3")
    assert got == [("gsm8k-test-0", made.traces[0]["reasoning"], "0"), ("gsm8k-test-0", made.traces[1]["reasoning"], "1")]


@pytest.mark.parametrize(("args", "expect"), [
    ((), "give --dataset NAME: an OpenAI batch does not say which dataset"),
    (("--dataset", "gsm8k"), "give --problems FILE (the gsm8k problems in the dataset's own format)"),
    (("--dataset", "gsm9k", "--problems", "P"), "--dataset: unknown dataset 'gsm9k'"),
    (("--dataset", "gsm8k", "--problems", "missing.jsonl"), "batch_out.jsonl: --problems: missing.jsonl: no such file"),
    (("--dataset", "gsm8k", "--problems", "P", "--map", "reasoning=x"), "which takes no --map"),
    (("--dataset", "gsm8k", "--problems", "FIVE", "--requests", "R"),
     "batch_out.jsonl:6: field 'custom_id': request 'request-5': no problem of --problems five.jsonl has problem_id "
     "'request-5' or the question 'Kylar went to the store to buy glasses for his new apartment'"),
    (("--dataset", "gsm8k", "--problems", "P", "--requests", "BROKEN"),
     "broken.jsonl:2: field 'custom_id': 'gsm8k-test-0' is also the custom_id of line 1"),
])
def test_bad_options_and_unmatched_requests_are_one_line(made: Made, tmp_path: Path, args: tuple[str, ...],
                                                         expect: str) -> None:
    five = tmp_path / "five.jsonl"
    five.write_text("".join(made.problems.read_text().splitlines(keepends=True)[:5]))
    first = made.requests.read_text().splitlines(keepends=True)[0]
    (tmp_path / "broken.jsonl").write_text(first + first)
    names = {"P": str(made.problems), "FIVE": "five.jsonl", "R": str(made.requests), "BROKEN": "broken.jsonl"}
    r = legival("ingest", str(made.batch), "--db", str(tmp_path / "s.duckdb"), *(names.get(a, a) for a in args),
                cwd=tmp_path)
    r.error(expect)
    assert not (tmp_path / "s.duckdb").exists() or not _stored(tmp_path / "s.duckdb")


def test_the_batch_input_file_given_as_the_traces_says_what_to_do(made: Made, tmp_path: Path) -> None:
    r = _ingest(tmp_path / "s.duckdb", made.dir / "failed_requests.jsonl", made=made)
    r.error("failed_requests.jsonl: is an OpenAI batch INPUT file (the requests): give the batch output file, with "
            "this one as --requests")


def test_auto_tells_a_batch_from_our_own_jsonl(made: Made, tmp_path: Path) -> None:
    from legival_core.readers.sources import choose

    assert choose(made.batch) == choose(made.dir / "completions.jsonl.gz") == "openai"
    assert choose(EXAMPLES / "gsm8k_gpt-oss-120b_200.jsonl") == "legival"  # has a text `response`, no custom_id


def test_one_request_answered_twice_in_one_input_is_a_conflict_naming_both_lines(made: Made, tmp_path: Path) -> None:
    """Issue 45 item 6: the same custom_id twice with different answers is one request given two traces
    (an error naming both lines, as a problem redefined is; `--skip-bad` keeps the first); the same line
    twice is a counted duplicate."""
    first, other = (json.loads(x) for x in made.batch.read_text().splitlines()[:2])
    again = json.loads(json.dumps(first))
    again["response"]["body"]["choices"] = other["response"]["body"]["choices"]  # another (real) answer
    conflict = _jsonl(tmp_path / "twice.jsonl", [first, other, again])
    db = tmp_path / "s.duckdb"
    cid = first["custom_id"]
    _ingest(db, conflict, "--requests", made.requests, made=made).error(
        f"{conflict}:3: field 'custom_id': custom_id {cid!r} is also at line 1 of this file, with another trace "
        "(reasoning, answer text differ)", "nothing from this file was stored")
    assert not db.exists() or not _stored(db)
    r = _ingest(db, conflict, "--requests", made.requests, "--skip-bad", made=made)
    assert (r.returncode, r.summary()["new_traces"], r.summary()["bad_lines"]) == (0, 2, 1), r.stderr
    assert {t[6] for t in _stored(db)} == {made.traces[0]["reasoning"], made.traces[1]["reasoning"]}
    same = _ingest(tmp_path / "d.duckdb", _jsonl(tmp_path / "same.jsonl", [first, other, first]), "--requests",
                   made.requests, made=made)
    assert (same.returncode, same.summary()["new_traces"], same.summary()["duplicate_records"]) == (0, 2, 1), same.stderr
    # two choices of one request: the choice is part of the unit (choice 1 answered twice differently)
    two = json.loads(json.dumps(first))
    two["response"]["body"]["choices"].append(other["response"]["body"]["choices"][0] | {"index": 1})
    three = json.loads(json.dumps(two))
    three["response"]["body"]["choices"][1] = first["response"]["body"]["choices"][0] | {"index": 1}
    n2 = _jsonl(tmp_path / "n2.jsonl", [two, three])
    _ingest(tmp_path / "n2.duckdb", n2, made=made).error(
        f"{n2}:2: field 'custom_id': custom_id {cid!r}, choice 1 is also at line 1 of this file, with another trace")
