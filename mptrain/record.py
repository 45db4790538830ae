"""The base of every record mptrain writes or reports (summary.json, compare.json, plan.json,
the check-gpu report, lint's findings, ...): typed, and a key it does not know is an error,
so a misspelt field cannot pass unseen. A `FrozenRecord` does not change once made (what a
run measured)."""

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class FrozenRecord(Record):
    model_config = ConfigDict(frozen=True)
