"""How two experiments differ, key by key: what `run --resume`, a resumed compare or plan, and
`policy: auto` following a plan each check before they go on (each refuses or ignores its
own keys)."""

from __future__ import annotations

from typing import Any

# Keys a run resolves (from its data, or `auto` from this machine), with the value that asks
# for that: an experiment that asks again asks for what the run resolved.
RESOLVED = {"model.num_classes": None, "data.image_size": None, "policy": "auto"}


def changed_keys(stored: Any, wanted: Any, prefix: str = "") -> list[str]:
    """The keys (as `a.b.c`) whose values differ between two experiments' dicts; a key one
    resolved that the other asks to resolve again (`RESOLVED`) does not."""
    if isinstance(stored, dict) and isinstance(wanted, dict):
        keys = sorted(set(stored) | set(wanted))
        return [d for k in keys for d in changed_keys(stored.get(k), wanted.get(k), f"{prefix}{k}.")]
    key = prefix.rstrip(".")
    asks_again = key in RESOLVED and wanted == RESOLVED[key]
    return [] if stored == wanted or asks_again else [key]


def value_at(raw: dict, key: str) -> Any:
    """The value of a dotted key (`a.b.c`) in an experiment's dict; None where there is none."""
    for part in key.split("."):
        raw = raw.get(part) if isinstance(raw, dict) else None
    return raw
