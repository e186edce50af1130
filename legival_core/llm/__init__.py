"""The client layer of every model call made over HTTP: `transport` (the one sender of OpenAI-compatible
chat-completions, completions and model-list requests, with httpx), `errors` (transient vs permanent,
one classification of httpx errors and HTTP statuses, secret scrubbing), `retry` (the one retry loop
and its backoffs), `ratelimit` (requests per minute), `breaker` (a run's circuit breaker), `cost`
(prices and estimates) and `fanout` (many calls at once on daemon threads, which a cancel never waits
for).

It sits below the domain packages: the student backend (`backends.openai_backend`), the teacher chat
engine (`generation.engines`) and the judges (`judges.openai_compat`; `judges.gemini` keeps its SDK
call and uses the errors, limits and costs) build on it, and it imports nothing of theirs.
"""
