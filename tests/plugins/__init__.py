"""Registry plugins that exist only for the tests (loaded through `LEGIVAL_PLUGINS`)."""
