"""Human legibility studies (issue 42, docs/study.md): the same transfer test with people as students.

`settings` holds the options of `legival study create` and their defaults (`serve_settings`: those of
`legival study serve`), `candidates` what a design is chosen from (read from the store), `design` the
pure design (items on the SPEC's depth grid, a Latin-square assignment, attention checks), `links` the
participants' and the admin's tokens (derived from a key file, never stored), `create` the whole
`legival study create` path. Serving: `served` (the study read once from the store; answers and events
to the store's journal), `server` (the Starlette app), `pages` (its HTML), `answers` (the one check of an
answer, for the server and an import). `label_studio`: a study run in Label Studio, exported and read
back. The SQL is `legival_core/store/study*.py`.
"""
