"""Rendering for people: consoles (`console`), live progress on stderr (`progress`), and on
stdout the results of training (`tables`: run, compare, plan, runs) and what the commands that
look before training print (`views`: check-gpu, lint, diagnose, memory), each fitting 80
columns (`fitted`). The pictures (compare.png, plan.png) are `measure.plot`'s. Library code
returns result objects; only these modules and the CLI print. Progress always goes to stderr,
so `--json` leaves stdout holding nothing but the JSON document."""
