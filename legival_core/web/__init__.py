"""What every HTTP server Legi-Val starts for a browser shares (the live dashboard, the human-study
server): the guard against DNS rebinding and cross-site requests (`guard`), and a uvicorn server on a
socket bound before any work, with bounded requests and a deadline on every request head (`server`).
docs/security.md says why each rule exists."""
