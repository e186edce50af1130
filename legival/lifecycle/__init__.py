"""How a command ends: signals raised as an interrupt with a deadline (`signals`), the graceful cancel of
`legival run` and `calibrate` (`cancel`), and the stop of the browser-facing servers (`servers`)."""
