"""The embedding backends behind `Embedder`: sentence-transformers on torch, and the same module
exported once and run by OpenVINO or ONNX Runtime (optionally int8).

Every backend feeds the model the tokens of sentence-transformers' own `preprocess`, in batches of
sentences sorted by their TOKEN count: a batch is padded to its longest member, and sorting by
characters (what `SentenceTransformer.encode` does) left 38-49% of the GSM8K developer traces'
tokens as padding at batch 16-32, against 0.4% here. The model's output (its pooling and Normalize
modules included) is L2-normalised once more, as `encode(normalize_embeddings=True)` does.

An exported graph is written once per machine under `$LEGIVAL_EMBED_CACHE` (default
`~/.cache/legival/embed`), in a folder named by a hash of the model files, the backend, the precision
and the library versions; a folder that cannot be written is replaced by a temporary one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

EXPORT_VERSION = "1"
"""Bump when the exported graph changes (the folder name includes it)."""
_TEXT_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Runtime(Protocol):
    name: str

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per sentence, in order."""
        ...


def load_runtime(path: str, backend: str, precision: str) -> Runtime:
    """The runtime of `backend` for the model at `path` ("auto": torch on a CUDA device, else ONNX
    Runtime, falling back to torch for a model that does not export; int8 always runs on ONNX Runtime)."""
    if precision == "int8":
        if backend not in ("auto", "onnx"):
            raise ValueError(f"int8 embeddings run on the onnx backend, not {backend!r}")
        return OnnxRuntime(path, "int8")
    if backend == "torch" or (backend == "auto" and _cuda()):
        return TorchRuntime(path)
    if backend == "openvino":
        return OpenVinoRuntime(path)
    if backend == "onnx":
        return OnnxRuntime(path, "fp32")
    try:
        return OnnxRuntime(path, "fp32")
    except Exception as e:  # noqa: BLE001 - any export failure falls back to the reference backend
        log.warning("ONNX export failed for %s (%s); embedding with torch", path, e)
        return TorchRuntime(path)


def _workers() -> int:
    """Concurrent single-threaded inference calls: the CPUs this process may use (Ray sets
    OMP_NUM_THREADS to an actor's num_cpus)."""
    env = os.environ.get("OMP_NUM_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


@lru_cache(maxsize=4)
def sentence_transformer(path: str, device: str = "cpu", eager: bool = False) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device, model_kwargs={"attn_implementation": "eager"} if eager else None)


def _dim(st: Any) -> int:
    f = getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension
    return int(f())


def _normalize(x: np.ndarray) -> np.ndarray:
    import numpy as np

    x = np.asarray(x, dtype=np.float32)
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def token_batches(st: Any, sentences: Sequence[str], batch: int, names: Sequence[str] = _TEXT_INPUTS,
                  slice_size: int = 2048) -> Iterator[tuple[list[int], dict[str, np.ndarray]]]:
    """(indices, int64 features) per batch, sentences sorted by token count (longest first); every row's
    tokens are those of `st.preprocess`, re-padded (right) to its batch's longest row."""
    import numpy as np

    pad = {"input_ids": int(getattr(st.tokenizer, "pad_token_id", None) or 0)}
    order = sorted(range(len(sentences)), key=lambda i: -len(sentences[i]))
    rows: list[tuple[int, int, dict[str, Any]]] = []
    for s in range(0, len(order), slice_size):
        idx = order[s : s + slice_size]
        rows += zip(idx, *_tokens(st, [sentences[i] for i in idx], names), strict=True)
    rows.sort(key=lambda t: -t[1])
    for b in range(0, len(rows), batch):
        part = rows[b : b + batch]
        width = part[0][1]
        feats = {k: np.full((len(part), width), pad.get(k, 0), dtype=np.int64) for k in part[0][2]}
        for r, (_i, n, toks) in enumerate(part):
            for k, v in toks.items():
                feats[k][r, :n] = v
        yield [i for i, _n, _t in part], feats


def _tokens(st: Any, texts: list[str], names: Sequence[str],
            direct: bool | None = None) -> tuple[list[int], list[dict[str, Any]]]:
    """(token count, {feature: tokens}) per text. A plain text `Transformer` module's tokenizer is called
    directly, as its `preprocess` calls it (truncation to `max_seq_length`; identical ids on every
    sentence of the GSM8K developer traces, tested) but without padding or tensors, ~5x faster; any
    other first module goes through `st.preprocess`."""
    import numpy as np

    first = st[0]
    if direct is None:
        direct = type(first).__name__ == "Transformer" and set(getattr(first, "modality_config", {"text": 1})) == {"text"}
    if direct:
        enc = st.tokenizer(texts, truncation="longest_first", max_length=st.max_seq_length)
        keep = [k for k in names if k in enc]
        return [len(x) for x in enc["input_ids"]], [{k: enc[k][r] for k in keep} for r in range(len(texts))]
    f = st.preprocess(texts)
    keep = [k for k in names if k in f]
    mask = f["attention_mask"].numpy().astype(bool)
    arrays = {k: f[k].numpy() for k in keep}
    return ([int(m.sum()) for m in mask],
            [{k: np.asarray(a[r][mask[r]]) for k, a in arrays.items()} for r in range(len(texts))])


class TorchRuntime:
    """sentence-transformers' module on torch (CUDA when available), token-sorted batches."""

    name = "torch"

    def __init__(self, path: str) -> None:
        device = "cuda" if _cuda() else "cpu"
        self.st = sentence_transformer(path, device)
        self.batch = 256 if device == "cuda" else 32

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        import numpy as np
        import torch

        out = np.zeros((len(sentences), _dim(self.st)), dtype=np.float32)
        with torch.inference_mode():
            for idx, feats in token_batches(self.st, sentences, self.batch):
                f = {k: torch.from_numpy(v).to(self.st.device) for k, v in feats.items()}
                out[idx] = self.st(f)["sentence_embedding"].float().cpu().numpy()
        return _normalize(out)


class OpenVinoRuntime:
    """The exported module on OpenVINO's CPU plugin (`pip install openvino`; not a dependency: it was
    at most 5% faster than ONNX Runtime here, weighs 180 MB and its import reports usage to Intel
    unless opted out): fp32 inference (never its bf16 default on CPUs that have it), throughput mode
    (one stream per core), tokenising the next batch while it runs."""

    name = "openvino"
    batch = 16

    def __init__(self, path: str) -> None:
        import openvino as ov

        self.st = sentence_transformer(path)
        xml = exported(path, "openvino", "fp32", lambda d: _export_openvino(path, d))
        core = ov.Core()
        self.compiled = core.compile_model(core.read_model(xml), "CPU",
                                           {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"})
        self.inputs = [i.get_any_name() for i in self.compiled.inputs]

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        import numpy as np
        import openvino as ov

        out = np.zeros((len(sentences), _dim(self.st)), dtype=np.float32)
        queue = ov.AsyncInferQueue(self.compiled)

        def done(request: Any, idx: list[int]) -> None:
            out[idx] = request.get_output_tensor(0).data

        queue.set_callback(done)
        for idx, feats in token_batches(self.st, sentences, self.batch, self.inputs):
            queue.start_async({k: feats[k] for k in self.inputs}, idx)
        queue.wait_all()
        return _normalize(out)


class OnnxRuntime:
    """The exported module on ONNX Runtime (BERT graphs fused by its transformer optimizer), in
    throughput mode: one single-threaded call per CPU at a time (faster here than one call on all
    CPUs: 305 vs 285 sentences/s), tokenising ahead. int8: dynamic quantisation of the MatMul and
    Attention weights, per channel."""

    name = "onnx"
    batch = 16

    def __init__(self, path: str, precision: str) -> None:
        import onnxruntime as ort

        self.st = sentence_transformer(path)
        self.precision = precision
        model = exported(path, "onnx", precision, lambda d: _export_onnx(path, d, precision))
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.workers = _workers()

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

        import numpy as np

        out = np.zeros((len(sentences), _dim(self.st)), dtype=np.float32)

        def run(idx: list[int], feats: dict[str, np.ndarray]) -> None:
            out[idx] = self.session.run(None, {k: feats[k] for k in self.inputs})[0]

        pending: set[Future[None]] = set()
        with ThreadPoolExecutor(self.workers) as pool:
            for idx, feats in token_batches(self.st, sentences, self.batch, self.inputs):
                if len(pending) >= 2 * self.workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        f.result()
                pending.add(pool.submit(run, idx, feats))
            for f in pending:
                f.result()
        return _normalize(out)


# ------------------------------------------------------------------------------------------ export


def _cache_root() -> Path:
    return Path(os.environ.get("LEGIVAL_EMBED_CACHE") or Path.home() / ".cache" / "legival" / "embed")


def _fingerprint(path: str, backend: str, precision: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    p = Path(path)
    files = sorted((str(f.relative_to(p)), f.stat().st_size, f.stat().st_mtime_ns)
                   for f in p.rglob("*") if f.is_file()) if p.is_dir() else [path]
    libs: dict[str, str | None] = {}
    own = ("openvino",) if backend == "openvino" else ("onnxruntime", "onnx")
    for lib in ("torch", "transformers", "sentence-transformers", *own):
        try:
            libs[lib] = version(lib)
        except PackageNotFoundError:
            libs[lib] = None
    blob = json.dumps([str(p.resolve()), files, backend, precision, EXPORT_VERSION, libs], sort_keys=True)
    return hashlib.blake2b(blob.encode(), digest_size=12).hexdigest()


_temp_dirs: list[tempfile.TemporaryDirectory[str]] = []


def exported(path: str, backend: str, precision: str, build: Callable[[Path], Path]) -> Path:
    """The exported model file of (model, backend, precision): built once into the cache folder (a
    temporary folder when that cannot be written), then reused by every process."""
    name = f"{backend}-{precision}-{_fingerprint(path, backend, precision)}"
    final = _cache_root() / name
    ready = final / "READY"
    if ready.is_file():
        return final / ready.read_text(encoding="utf-8").strip()
    try:
        final.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
    except OSError:
        tmp = tempfile.TemporaryDirectory(prefix="legival-embed-")
        _temp_dirs.append(tmp)
        return build(Path(tmp.name))
    try:
        file = build(work)
        (work / "READY").write_text(file.name, encoding="utf-8")
        work.chmod(0o755)  # mkdtemp makes it private; the export is no secret
        try:
            os.replace(work, final)
        except OSError:  # another process finished first: use its copy
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return final / (final / "READY").read_text(encoding="utf-8").strip()


def _module(path: str, eager: bool) -> tuple[Any, dict[str, Any]]:
    """A torch module (token tensors -> sentence embedding) around the whole sentence-transformers
    pipeline (transformer, pooling, normalize, ...), and example inputs."""
    import torch

    st = sentence_transformer(path, "cpu", eager)
    feats = st.preprocess(["An example sentence to trace.", "Another one."])
    names = [k for k in _TEXT_INPUTS if k in feats]

    class Encode(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.st = st

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            f = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                f["token_type_ids"] = token_type_ids
            return self.st(f)["sentence_embedding"]

    return Encode().eval(), {k: feats[k] for k in names}


def _export_openvino(path: str, folder: Path) -> Path:
    import openvino as ov
    import torch

    module, example = _module(path, eager=False)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shape-dependent branches (constant here)
        model = ov.convert_model(module, example_input=example)
    ov.save_model(model, folder / "model.xml", compress_to_fp16=False)
    return folder / "model.xml"


def _export_onnx(path: str, folder: Path, precision: str) -> Path:
    import torch

    module, example = _module(path, eager=True)  # eager attention: the pattern ORT's optimizer fuses
    names = list(example)
    raw = folder / "model-raw.onnx"
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, tuple(example.values()), str(raw), input_names=names, output_names=["embedding"],
                          dynamic_axes={**{k: {0: "batch", 1: "tokens"} for k in names}, "embedding": {0: "batch"}},
                          opset_version=17, dynamo=False)
    model = raw
    config = module.st[0].auto_model.config
    if getattr(config, "model_type", None) == "bert":
        from onnxruntime.transformers.optimizer import optimize_model

        opt = optimize_model(str(raw), model_type="bert", num_heads=config.num_attention_heads,
                             hidden_size=config.hidden_size)
        model = folder / "model-fused.onnx"
        opt.save_model_to_file(str(model))
    if precision == "int8":
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        q = folder / "model-int8.onnx"
        quantize_dynamic(str(model), str(q), weight_type=QuantType.QInt8, per_channel=True,
                         op_types_to_quantize=["MatMul", "Attention"],
                         extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
        model = q
    for f in folder.glob("*.onnx"):
        if f != model:
            f.unlink()
    return model
