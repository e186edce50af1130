"""Human legibility studies (issue 42, docs/study.md): the same transfer test with people as students.

`settings` holds the options and their defaults, `design` the pure design (items on the SPEC's depth
grid, a Latin-square assignment, attention checks), `candidates` what the design is chosen from (read
from the store), `tokens` the participants' and the admin's links (derived from a key file, never
stored), `create` the whole `legival study create` path. The SQL is `legival_core/store/study.py`.
"""
