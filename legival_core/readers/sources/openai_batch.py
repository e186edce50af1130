"""OpenAI Batch API output files and saved chat completions as a trace source (`legival ingest --from
openai`, docs/sources.md). Base install: the JSON is read by our own readers (`input_files`), so a
`.gz` or `.zst` file is read as a stream like any other.

One line of the file is one of:

- a Batch API output line, `{"id", "custom_id", "response": {"status_code", "request_id", "body": <a
  chat.completion>}, "error"}`; a failed request (`error` set, or a status other than 200) is that
  line's error, with the reason the batch gives (`--skip-bad` skips and counts it): never a trace;
- a saved `chat.completion` object (`"object": "chat.completion"`), optionally with the request's
  `messages` and a `custom_id` saved next to it.

The completion's message carries the reasoning in `reasoning_content` or `reasoning` (vLLM's reasoning
parsers, DeepSeek, OpenRouter, Groq...) and the answer in `content`; a message with neither reasoning
field is read as a raw output whose thinking section is marked (`<think>`, `[THINK]`, harmony), and one
without such a section is an error (a reasoning model served without a reasoning parser?). Each choice is
a trace (`n` > 1 gives several per line); `finish_reason: length` marks it truncated.

A batch holds no gold answer and names no dataset: `--dataset` and `--problems` (the dataset's problems
in its own format, loaded by the dataset's own loader as `legival generate` loads them) are required.
Each line's problem is the one whose `problem_id` is its `custom_id`, else the one whose question is the
request's last user message (`--requests`, the batch INPUT file, matched by `custom_id`; for a saved
completion: its own `messages`, else the request on the same position of `--requests`), compared
exactly, then with whitespace collapsed, then as the longest problem question the message contains (a
prompt template around it). The problem stored is the dataset's own (question, gold, choices); a line
whose problem is not found is an error naming its `custom_id`. The teacher is the completion's `model`
unless `--teacher`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from legival_core.readers.input_files import InputFileError, open_input, read_lines
from legival_core.readers.records import LineProblem, jsonl_lines, parse_json_line
from legival_core.readers.sources import Record, SourceInfo, SourceOptions, dataset_of_task
from legival_core.readers.trace_records import IngestError, SkippedUnit, file_error
from legival_core.registry import get, register
from legival_core.thinking import split_thinking
from legival_core.types import Problem

FORMAT = "openai"
JSONL_NAMES = (".jsonl", ".json", ".ndjson")
_SPACE = re.compile(r"\s+")


def _shape(rec: Any) -> str | None:
    """'batch' (a Batch API output line), 'completion' (a saved chat.completion), 'request' (a batch
    INPUT line: the requests, not their answers) or None."""
    if not isinstance(rec, dict):
        return None
    if "custom_id" in rec and isinstance(rec.get("response"), dict | None) and ("response" in rec or "error" in rec):
        return "batch"
    if rec.get("object") == "chat.completion":
        return "completion"
    if "custom_id" in rec and isinstance(rec.get("body"), dict) and "url" in rec:
        return "request"
    return None


def sniff(path: Path) -> bool:
    """A JSONL file (plain, .gz, .zst) whose first record is a batch output line, a chat.completion, or
    a batch input line (so that the reader can say what to do with it). Our own records have no
    `custom_id` and a text `response`."""
    name = path.name.lower()
    for c in (".gz", ".zst", ".zstd"):
        name = name.removesuffix(c)
    if not name.endswith(JSONL_NAMES) or not path.is_file():
        return False
    try:
        with open_input(path) as f:
            for _, raw in f.lines():
                if raw.strip():
                    rec = parse_json_line(raw, 1)
                    return not isinstance(rec, LineProblem) and _shape(rec) is not None
    except InputFileError:
        return False
    return False


# ------------------------------------------------------------------------------------------ reading


def read_openai(path: Path, options: SourceOptions) -> Iterator[Record]:
    """(line number, record or its error) for each choice of each line (module docstring)."""
    name = str(path)
    try:
        lines = jsonl_lines(read_lines(path))
        first = next(lines, None)
        if first is not None and _shape(first[1]) == "request":
            raise file_error(name, "is an OpenAI batch INPUT file (the requests): give the batch output file, "
                                   "with this one as --requests")
        dataset = _dataset(options, name)
        problems = _Problems.load(options.problems, dataset, name)
        requests = _Requests.load(options.requests) if options.requests is not None else None
        reader = _Lines(name, dataset, problems, requests, options.teacher)
        position = 0
        while first is not None:
            line, rec = first
            position += 1
            if isinstance(rec, LineProblem):
                yield line, IngestError(name, line, rec.field, rec.message)
            else:
                for r in reader.records(line, position, rec):
                    yield line, r
            first = next(lines, None)
    except InputFileError as e:
        raise file_error(e.file, e.message) from None


def _dataset(options: SourceOptions, name: str) -> str:
    if options.dataset is None:
        raise file_error(name, "give --dataset NAME: an OpenAI batch does not say which dataset its requests are")
    got = dataset_of_task(options.dataset, options.dataset, name, 0, "file")
    if isinstance(got, IngestError):
        raise file_error(name, f"--dataset: {got.message}")
    return got


def _normal(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


@dataclass(frozen=True, slots=True)
class _Problems:
    """The dataset's problems (`--problems`), found by id or by question (module docstring)."""

    file: Path
    by_id: dict[str, Problem]
    by_question: dict[str, Problem]
    by_normal: dict[str, Problem]
    longest_first: list[tuple[str, Problem]]

    @staticmethod
    def load(path: Path | None, dataset: str, name: str) -> _Problems:
        if path is None:
            raise file_error(name, f"give --problems FILE (the {dataset} problems in the dataset's own format): "
                                   "a batch holds no gold answers")
        try:
            items = list(get("dataset", dataset).load(path))  # the DatasetSpec (grading sits below datasets)
        except (OSError, ValueError) as e:
            msg = str(e)
            raise file_error(name, f"--problems: {msg}" if msg.startswith(f"{path}:") else
                                   f"--problems {path}: cannot load it ({msg})") from None
        by_id: dict[str, Problem] = {}
        by_question: dict[str, Problem] = {}
        by_normal: dict[str, Problem] = {}
        for p in items:
            by_id.setdefault(p.problem_id, p)
            by_question.setdefault(p.question, p)
            by_normal.setdefault(_normal(p.question), p)
        longest = sorted(((q, p) for q, p in by_normal.items() if q), key=lambda qp: -len(qp[0]))
        return _Problems(path, by_id, by_question, by_normal, longest)

    def find(self, custom_id: str | None, question: str | None) -> Problem | None:
        if custom_id is not None and custom_id in self.by_id:
            return self.by_id[custom_id]
        if question is None:
            return None
        found = self.by_question.get(question) or self.by_normal.get(_normal(question))
        if found is not None:
            return found
        text = _normal(question)
        return next((p for q, p in self.longest_first if len(q) <= len(text) and q in text), None)


@dataclass(frozen=True, slots=True)
class _Requests:
    """A batch input file (`--requests`): each request's last user message, by custom_id and by position."""

    file: Path
    by_id: dict[str, str]
    in_order: list[str]

    @staticmethod
    def load(path: Path) -> _Requests:
        where = str(path)
        by_id: dict[str, str] = {}
        lines_of: dict[str, int] = {}
        in_order: list[str] = []
        try:
            for line, rec in jsonl_lines(read_lines(path)):
                if isinstance(rec, LineProblem):
                    raise IngestError(where, line, rec.field, f"{rec.message} (--requests)")
                cid = rec.get("custom_id")
                if not isinstance(cid, str) or not cid:
                    raise IngestError(where, line, "custom_id", "expected a non-empty string (--requests: an OpenAI "
                                                                "batch input file)")
                if cid in lines_of:
                    raise IngestError(where, line, "custom_id", f"{cid!r} is also the custom_id of line {lines_of[cid]}")
                body = rec.get("body")
                messages = body.get("messages") if isinstance(body, dict) else None
                question = _last_user(messages)
                if question is None:
                    raise IngestError(where, line, "body.messages", "no user message with text (--requests: the "
                                                                    "question is the request's last user message)")
                lines_of[cid] = line
                by_id[cid] = question
                in_order.append(question)
        except InputFileError as e:
            raise file_error(e.file, e.message) from None
        return _Requests(path, by_id, in_order)


def _last_user(messages: Any) -> str | None:
    """The text of the last user message (a string, or the text parts of a content list)."""
    if not isinstance(messages, list):
        return None
    for m in reversed(messages):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, str):
                return content
            if isinstance(content, list):
                parts = [p.get("text") for p in content if isinstance(p, dict) and p.get("type") == "text"]
                text = "".join(t for t in parts if isinstance(t, str))
                return text or None
            return None
    return None


@dataclass(frozen=True, slots=True)
class _Lines:
    file: str
    dataset: str
    problems: _Problems
    requests: _Requests | None
    teacher: str | None

    def records(self, line: int, position: int, rec: dict[str, Any]) -> list[dict[str, Any] | IngestError]:
        try:
            return self._records(line, position, rec)
        except IngestError as e:
            return [e]

    def _error(self, line: int, field: str, message: str) -> IngestError:
        return IngestError(self.file, line, field, message)

    def _records(self, line: int, position: int, rec: dict[str, Any]) -> list[dict[str, Any] | IngestError]:
        shape = _shape(rec)
        cid = rec.get("custom_id")
        if cid is not None and (not isinstance(cid, str) or not cid):
            raise self._error(line, "custom_id", f"expected a non-empty string, got {cid!r:.60}")
        who = f"request {cid!r}" if cid else "this completion"
        if shape == "batch":
            body, prefix = self._batch_body(line, cid, rec), "response.body."
        elif shape == "completion":
            body, prefix = rec, ""
        else:
            raise self._error(line, "<record>", "neither an OpenAI Batch API output line (custom_id, response) nor "
                                                "a chat.completion object" + (" (a batch INPUT line: give it as --requests)"
                                                                              if shape == "request" else ""))
        question = self._question(line, position, cid, rec, shape)
        problem = self.problems.find(cid, question)
        if problem is None:
            q = "" if question is None else f"the question {_normal(question)[:60]!r}"
            what = f"problem_id {cid!r}" + (f" or {q}" if q else "") if cid else q
            raise self._error(line, "custom_id" if cid else "messages",
                              f"{who}: no problem of --problems {self.problems.file} has {what}")
        teacher = self.teacher or body.get("model")
        if not isinstance(teacher, str) or not teacher:
            raise self._error(line, f"{prefix}model", "expected the model's name (or give --teacher NAME)")
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices:
            raise self._error(line, f"{prefix}choices", f"{who}: expected a non-empty list of choices")
        base = {"teacher": teacher, "dataset": self.dataset, "problem_id": problem.problem_id,
                "problem": problem.question, "gold_answer": problem.gold,
                **({"choices": list(problem.choices)} if problem.choices else {}),
                **({"custom_id": cid} if cid else {}),
                **({"completion_id": body["id"]} if isinstance(body.get("id"), str) else {})}
        out: list[dict[str, Any] | IngestError] = []
        for i, choice in enumerate(choices):
            try:
                out.append({**base, **self._choice(line, f"{prefix}choices[{i}]", who, choice),
                            **({"choice": i} if len(choices) > 1 else {})})
            except IngestError as e:
                out.append(e)
        return out

    def _batch_body(self, line: int, cid: str | None, rec: dict[str, Any]) -> dict[str, Any]:
        if not cid:
            raise self._error(line, "custom_id", "expected a non-empty string")
        err = rec.get("error")
        if err:
            what = (f"{err.get('code') or 'error'}: {err.get('message') or ''}".strip(": ")
                    if isinstance(err, dict) else str(err))
            raise SkippedUnit(self.file, line, "error", f"request {cid!r} failed ({what[:200]}): no trace")
        response = rec.get("response")
        if not isinstance(response, dict):
            raise self._error(line, "response", f"request {cid!r}: no response and no error")
        status = response.get("status_code")
        body = response.get("body")
        if status != 200:
            detail = body.get("error") if isinstance(body, dict) else None
            msg = detail.get("message") if isinstance(detail, dict) else detail
            raise SkippedUnit(self.file, line, "response.status_code",
                              f"request {cid!r} failed with HTTP {status}" + (f" ({str(msg)[:200]})" if msg else "")
                              + ": no trace")
        if not isinstance(body, dict):
            raise self._error(line, "response.body", f"request {cid!r}: expected a chat.completion object")
        return body

    def _question(self, line: int, position: int, cid: str | None, rec: dict[str, Any], shape: str) -> str | None:
        """The request's last user message (module docstring), or None where nothing gives it."""
        if shape == "completion" and "messages" in rec:
            q = _last_user(rec["messages"])
            if q is None:
                raise self._error(line, "messages", "no user message with text")
            return q
        if self.requests is None:
            if cid is None:
                raise self._error(line, "messages", "a saved chat completion needs its request to find its problem: "
                                                    "its `messages` or `custom_id` on the line, or --requests")
            return None
        if cid is not None:
            if cid not in self.requests.by_id:
                if cid in self.problems.by_id:
                    return None
                raise self._error(line, "custom_id", f"request {cid!r} is not in --requests {self.requests.file}")
            return self.requests.by_id[cid]
        if position > len(self.requests.in_order):
            raise self._error(line, "<record>", f"completion {position} has no request: --requests "
                                                f"{self.requests.file} holds {len(self.requests.in_order)}")
        return self.requests.in_order[position - 1]

    def _choice(self, line: int, where: str, who: str, choice: Any) -> dict[str, Any]:
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            raise self._error(line, f"{where}.message", f"{who}: expected the assistant's message")
        for key in ("reasoning_content", "reasoning", "content"):
            v = message.get(key)
            if v is not None and not isinstance(v, str):
                raise self._error(line, f"{where}.message.{key}", f"{who}: expected text or null, got {v!r:.60}")
        reasoning = message.get("reasoning_content")
        if reasoning is None:
            reasoning = message.get("reasoning")
        content = message.get("content")
        finish = choice.get("finish_reason")
        out: dict[str, Any] = {"truncated": finish == "length", "finish_reason": finish}
        if reasoning is not None:
            return {**out, "reasoning": reasoning, "response": content or ""}
        if content and split_thinking(content).format != "none":
            return {**out, "response": content}
        key = "reasoning_content" if "reasoning_content" in message or "reasoning" not in message else "reasoning"
        return_what = "is null" if key in message else "is missing"
        raise self._error(line, f"{where}.message.{key}", f"{who}: {return_what} and the content has no thinking "
                          "section (<think>, [THINK], harmony): no reasoning to measure (a reasoning model served "
                          "without a reasoning parser? vLLM: --reasoning-parser)")


register("format", FORMAT, read_openai, aliases=("openai-batch",),
         description="OpenAI Batch API output files and saved chat completions (reasoning_content / reasoning)",
         meta=SourceInfo(unit="line", sniff=sniff, options=("dataset", "requests", "problems"), order=50,
                         description="an OpenAI Batch API output file or saved chat completions",
                         key=("custom_id", "choice")))
