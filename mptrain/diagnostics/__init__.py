"""Answers to the questions mixed-precision users ask most: why no speed-up (`lint`), why NaN
(`numerics`, for `mptrain diagnose`), what fits (`memory.plan` in mptrain/runs/memory.py)."""
