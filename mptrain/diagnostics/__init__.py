"""Answers to the questions mixed-precision users ask most: why no speed-up (`lint`), why NaN
(`numerics`, for `mptrain diagnose`). What fits is `measure.memory.plan_memory`'s, from the
estimates of `model.size`."""
