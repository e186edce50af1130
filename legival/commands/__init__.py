"""One module per command; each decorates `legival.app.app`."""
