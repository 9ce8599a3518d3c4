"""The `soco` command line, one module per command group; `cli/soco.py` builds the parser (the console
script's entry point), `cli/demo.py` is `make demo`."""
