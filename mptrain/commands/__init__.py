"""What a user can type, one module per command (beside `cli.py`'s Typer layer, which only
parses, calls one of these and renders): compare, plan, runs, memory, check-gpu. Each builds
on the library below it (config, data, model, training, engine, verdicts, report) and imports
no other command."""
