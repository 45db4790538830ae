"""Rendering results for people: consoles (`console`), live progress on stderr (`progress`),
tables on stdout (`tables`), compare.png (`plot`). Library code returns result objects; only
these modules and the CLI print. Progress always goes to stderr, so `--json` leaves stdout
holding nothing but the JSON document."""
