"""The run folder: the one place that decides where a run's files go and writes them.

`OUTPUT_DIR/<name>-<timestamp>/` holds config.yaml (resolved), metrics.jsonl (one line per
epoch), steps.jsonl (one line per step), summary.json and model.keras. It is created only
once the experiment is valid and built, and removed again if the run fails, so a failed run
never leaves a half-written folder that looks like a result.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from mptrain.summary import EpochRecord, RunSummary, StepRecord


class RunFolder:
    def __init__(self, path: Path):
        self.path = path

    @classmethod
    def create(cls, parent: Path, name: str) -> RunFolder:
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        parent.mkdir(parents=True, exist_ok=True)
        path, n = parent / f"{name}-{stamp}", 1
        while path.exists():
            n += 1
            path = parent / f"{name}-{stamp}-{n}"
        path.mkdir()
        return cls(path)

    def write_config(self, config: dict[str, Any], header: str) -> None:
        text = yaml.safe_dump(config, sort_keys=False)
        (self.path / "config.yaml").write_text(f"{header}\n{text}")

    def write_files(self, files: dict[str, str]) -> None:
        """Text the data set hands over (class names, a tokenizer's vocabulary)."""
        for name, text in files.items():
            (self.path / name).write_text(text)

    def write_summary(self, summary: RunSummary) -> None:
        (self.path / "summary.json").write_text(to_json(summary.model_dump(), indent=2) + "\n")

    def save_model(self, model) -> None:
        model.save(self.path / "model.keras")

    def discard(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)

    def write_steps(self, steps: list[StepRecord]) -> None:
        """All step records at once: per-step file I/O would tax the training loop."""
        lines = "".join(to_json(asdict(record)) + "\n" for record in steps)
        (self.path / "steps.jsonl").write_text(lines)

    # TrainingListener: epoch records are appended as they happen (`tail -f metrics.jsonl`).
    def epoch_started(self, epoch: int, epochs: int, steps: int) -> None:
        pass

    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        pass

    def epoch_finished(self, record: EpochRecord) -> None:
        with open(self.path / "metrics.jsonl", "a") as fh:
            fh.write(to_json(asdict(record)) + "\n")


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


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
