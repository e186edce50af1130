"""`legival_core.llm.transport`: the one sender of OpenAI-compatible requests, against a local
chat-completions server (real HTTP); and the structural check that it IS the only one."""

from __future__ import annotations

import ast
import re
import socket
from collections.abc import Iterator

import httpx
import pytest

from legival_core.llm.errors import (
    LENIENT_STATUSES,
    STRICT_STATUSES,
    ConnectionFailed,
    EndpointRefused,
    PermanentError,
    TransientError,
)
from legival_core.llm.transport import CHAT_PATH, OpenAIEndpoint, api_root, raise_as_httpx
from tests.conftest import REPO
from tests.fakes import Canned
from tests.fakes.openai_server import FakeOpenAI

KEY = "sk-legival-transport-test-5b2e"
CORE = REPO / "legival_core"
SENDER = CORE / "llm" / "transport.py"
ENDPOINT = re.compile(r"(?:^|/v1)/(?:chat/completions|completions|models)(?:$|[?\s])")
"""An OpenAI-compatible endpoint path in a string literal (`/chat/completions`, `.../v1/models`, ...)."""
HTTPX_SENDERS = ("Client", "AsyncClient", "request", "get", "post", "put", "stream")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are module, class or function docstrings."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def senders(source: str) -> list[str]:
    """What in `source` builds or sends an OpenAI-compatible request: a string literal (not a
    docstring) naming an endpoint path, or a call of `httpx.Client(...)` / `httpx.post(...)` / ..."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
                and ENDPOINT.search(node.value)):
            found.append(f"line {node.lineno}: {node.value!r}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "httpx"
                and node.func.attr in HTTPX_SENDERS):
            found.append(f"line {node.lineno}: httpx.{node.func.attr}(...)")
    return found


def test_exactly_one_module_sends_openai_compatible_requests() -> None:
    offenders = {}
    for path in sorted(CORE.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        found = senders(text) + (["httpx.Client( in the text"] if "httpx.Client(" in text else [])
        if found:
            offenders[str(path.relative_to(REPO))] = found
    assert list(offenders) == [str(SENDER.relative_to(REPO))], offenders


def test_the_sender_detector_can_fire() -> None:
    assert senders('"""POST /v1/chat/completions."""\nx = 1\n') == []  # a docstring is not a request
    assert senders('import httpx\nc = httpx.Client(timeout=3)\n') == ["line 2: httpx.Client(...)"]
    assert senders('url = base + "/v1/completions"\n') == ["line 1: '/v1/completions'"]
    assert senders('import httpx\nhttpx.post(u, json={})\n') == ["line 2: httpx.post(...)"]
    assert senders('p = "configs/models/qwen3.yaml"\nq = "/models"\n') == ["line 2: '/models'"]


# ------------------------------------------------------------------------------------- the endpoint


@pytest.fixture
def srv() -> Iterator[FakeOpenAI]:
    with FakeOpenAI() as s:
        yield s


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_base_url_with_or_without_v1(srv: FakeOpenAI, suffix: str) -> None:
    api = OpenAIEndpoint(srv.url + suffix, api_key=KEY, timeout_s=10)
    assert (api.root, api.api_url) == (srv.url, srv.url + "/v1")
    r = api.chat({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
    (call,) = srv.requests
    assert (call.method, call.path, call.headers["authorization"]) == ("POST", "/v1" + CHAT_PATH, f"Bearer {KEY}")
    assert call.body == {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    api.close()
    assert api_root("http://h/api/v1/") == "http://h/api" and api_root("http://h/v1x") == "http://h/v1x"


def test_no_authorization_without_a_key(srv: FakeOpenAI) -> None:
    OpenAIEndpoint(srv.url, timeout_s=10, headers={"Content-Type": "application/json"}).chat({"model": "m"})
    assert "authorization" not in srv.requests[0].headers
    assert srv.requests[0].headers["content-type"] == "application/json"


@pytest.mark.parametrize(("status", "strict", "lenient"), [
    (201, PermanentError, None),  # only 200 is an answer to a judge; anything under 400 to a server
    (400, PermanentError, PermanentError),
    (404, EndpointRefused, EndpointRefused),
    (408, TransientError, TransientError),
    (409, PermanentError, TransientError),
    (429, TransientError, TransientError),
    (500, TransientError, TransientError),
    (501, PermanentError, TransientError),
    (503, TransientError, TransientError),
])
def test_one_classification_of_statuses_two_policies(
    srv: FakeOpenAI, status: int, strict: type | None, lenient: type | None
) -> None:
    for statuses, want in ((STRICT_STATUSES, strict), (LENIENT_STATUSES, lenient)):
        srv.script.append(Canned.error(status, retry_after="3", message=f"no, Bearer {KEY}"))
        api = OpenAIEndpoint(srv.url, api_key=KEY, timeout_s=10, statuses=statuses)
        if want is None:
            assert api.chat({}).status_code == status
            continue
        with pytest.raises(want) as ei:
            api.chat({})
        e = ei.value
        assert type(e) is want and str(e).startswith(f"HTTP {status}: ") and KEY not in str(e)
        assert e.response is not None and e.response.status_code == status and e.exception is None
        if isinstance(e, TransientError):
            assert e.retry_after == 3.0


def test_an_unreachable_endpoint_is_a_connection_failure() -> None:
    port = closed_port()
    api = OpenAIEndpoint(f"http://127.0.0.1:{port}/v1", api_key=KEY, timeout_s=5, connect_timeout_s=1)
    with pytest.raises(ConnectionFailed, match=rf"^cannot connect to http://127.0.0.1:{port}: connection refused$") as ei:
        api.chat({})
    assert isinstance(ei.value.exception, httpx.ConnectError) and ei.value.response is None
    assert KEY not in repr(api) + str(vars(api))


def test_raise_as_httpx_gives_back_what_httpx_raised(srv: FakeOpenAI) -> None:
    api = OpenAIEndpoint(srv.url, timeout_s=10, statuses=LENIENT_STATUSES)
    srv.script.append(Canned.error(503, message="warming up"))
    with pytest.raises(TransientError) as ei:
        api.chat({})
    with pytest.raises(httpx.HTTPStatusError, match="warming up") as retried:
        raise_as_httpx(ei.value, retried=True)
    assert retried.value.response.status_code == 503
    srv.script.append(Canned.error(404))
    with pytest.raises(PermanentError) as ei2:
        api.chat({})
    with pytest.raises(httpx.HTTPStatusError, match="Client error '404 Not Found'"):
        raise_as_httpx(ei2.value, retried=False)
    dead = OpenAIEndpoint(f"http://127.0.0.1:{closed_port()}", timeout_s=5)
    with pytest.raises(ConnectionFailed) as ei3:
        dead.chat({})
    with pytest.raises(httpx.ConnectError):
        raise_as_httpx(ei3.value, retried=True)

