"""The base of every record mptrain writes or reports (summary.json, compare.json, plan.json,
the check-gpu report, lint's findings, ...): typed, and a key it does not know is an error,
so a misspelt field cannot pass unseen. A `FrozenRecord` does not change once made (what a
run measured).

And the files records are kept in, written so that nothing misleads after a crash, a kill or
a power cut: whole files moved into place (`write_atomic`), JSON lines appended whole and
flushed (`append_lines`, `read_jsonl`), strict JSON (`to_json`).
"""

from __future__ import annotations

import json
import math
import os
from contextlib import suppress
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from mptrain.errors import DataError


class Record(BaseModel):
    # built on first use, not at import: `validate` and `--help` import records they never make
    model_config = ConfigDict(extra="forbid", defer_build=True)


class FrozenRecord(Record):
    model_config = ConfigDict(frozen=True)


def write_atomic(path: Path, text: str) -> None:
    """Write to a temporary file beside `path`, flush it to disk, then move it into place:
    a reader (or a crash) sees the old file or the new one, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def write_cache(path: Path, text: str) -> None:
    """A cache file, moved into place whole (its temporary file is this process's: workers
    may write the same cache at once), or not at all: an unwritable cache costs its work
    again next time, nothing more."""
    with suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, path)


def append_lines(path: Path, records: list[Any]) -> None:
    """Whole JSON lines, one write, flushed: a kill leaves complete lines only."""
    with open(path, "a") as fh:
        fh.write("".join(to_json(r) + "\n" for r in records))
        fh.flush()
        os.fsync(fh.fileno())


def to_json(obj: Any, indent: int | None = None) -> str:
    """Strict JSON: a diverged run's NaN/inf losses become null (jq and browsers reject NaN)."""
    return json.dumps(_finite(obj), indent=indent, allow_nan=False)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


def read_jsonl(path: Path, said: list[str] | None = None) -> list[dict[str, Any]]:
    """Every record of a JSON-lines file. Lines are appended whole, so only the last can be
    cut short (a kill, or a full disk, mid-write): it is left out, and `said` is told. A
    damaged line before it is an error naming it: skipping it would shift every later record
    by a step."""
    if not path.exists():
        return []
    text = path.read_text(errors="replace")
    lines = text.splitlines()
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            records.append(json.loads(line))
        except ValueError as exc:
            if number == len(lines) and not text.endswith("\n"):
                if said is not None:
                    said.append(f"{path.name}: its last line was cut short (the run stopped while "
                                "writing it) and is left out")
                break
            raise DataError(f"{path}, line {number}: not a whole record ({exc}); the file is damaged "
                            "(the lines after a damaged one cannot be placed); restore it from a "
                            "copy, or start the run again") from None
    return records
