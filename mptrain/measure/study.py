"""A study: the variants of one experiment measured side by side, in turns, and judged. That is
what `mptrain compare` and `mptrain plan` each are, and they live one life here.

A new study checks everything, stages the experiment and the initial weights every row starts
from, places its rows in its folder and writes its record (`new_study`). Then `run_study`, the
same for a new study and a resumed one (`StudyRecord.load`), starts its MLflow parent run,
runs the rows still to run in turns (`engine.run_rows`, which rewrites the record as each
ends), judges them and closes the study with its picture and its tables.

What a kind of study is, is its record's (`CompareRecord`, `PlanRecord`): which rows it runs
(chosen when it is staged), how they take turns (plan stops a trial that cannot win, and holds
a budget), how they are judged, and what is written at the end (plan's experiment file).
"""

from __future__ import annotations

import shutil
import tempfile
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple, Self, TypeVar

from mptrain.config.batch_scaling import at_batch
from mptrain.errors import ConfigError
from mptrain.measure.engine import Turns, ended_summary, past, run_rows, turn_steps
from mptrain.measure.memory import too_big_together
from mptrain.measure.variant import Variant
from mptrain.precision.candidates import file_label
from mptrain.record import Record, to_json, write_atomic
from mptrain.runs.folder import RunFolder, unique_folder
from mptrain.telling import LOGGED, Telling
from mptrain.training.turns import planned_steps

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.runs.experiment import Prepared


class StudyRecord(Record):
    """What compare.json and plan.json share, and what each kind of study says of itself."""

    KIND: ClassVar[str]  # compare or plan: the command, its folder's prefix, its record's name
    ROWS: ClassVar[str]  # the rows' key in KIND.json: compare's variants, plan's trials
    STAGED: ClassVar[str] = "experiment.yaml"  # what each row runs, with its own settings
    TURNS: ClassVar[dict[str, object]] = {}  # the kind's own `Turns` rules (who stops early)

    experiment: str
    folder: str
    status: Literal["running", "finished", "interrupted", "out of budget"] = "running"
    baseline: str = "float32"  # the label of the row every other is judged against
    turn_steps: int = 0  # steps each row ran per turn (0: not run in turns)
    input_ms_per_batch: float | None = None  # the input pipeline alone, measured before the runs
    pairs: str | None = None  # why the rows ran two by two with the baseline (memory)
    plot: str | None = None

    @property
    def rows(self) -> list[Variant]:
        return getattr(self, self.ROWS)

    @classmethod
    def load(cls, folder: Path) -> Self:
        """The record a `--resume` continues, or an error naming the folder. A row whose run
        has ended takes the summary in its run folder (`engine.ended_summary`): a study killed
        outright while the run's process was exiting never wrote it into its record (the row
        is then judged without that session's rounds, which only the killed process held)."""
        try:
            record = cls.model_validate_json((folder / f"{cls.KIND}.json").read_text())
        except (OSError, ValueError) as exc:
            raise ConfigError(f"--resume {folder}: not a {cls.KIND} folder ({exc})") from None
        return record.model_copy(update={cls.ROWS: [
            row if (summary := ended_summary(row)) is None else
            row.model_copy(update={"summary": summary, "failed": None}) for row in record.rows]})

    def write(self) -> None:
        """KIND.json in its folder, whole or not at all (a reader never sees half a record)."""
        write_atomic(Path(self.folder) / f"{self.KIND}.json", to_json(self.model_dump(), indent=2) + "\n")

    @abstractmethod
    def params(self) -> dict[str, str]:
        """What the study's MLflow parent run records of it."""

    @abstractmethod
    def nothing_left(self) -> str | None:
        """Why a resume would have nothing to run; None when it has."""

    @abstractmethod
    def draw(self, path: Path) -> None:
        """The study's picture (`plot.plot_study`), titled for its kind."""

    @abstractmethod
    def closed(self, signal: int | None) -> tuple[Self, dict[str, str], dict[str, str] | None]:
        """The study judged, with how it ended (`signal`: what interrupted it), the files it
        writes beside its record (name → text) and its MLflow tags."""


S = TypeVar("S", bound=StudyRecord)


@dataclass(frozen=True)
class Measurement:
    """What a compare or plan returns (its folder: `record.folder`)."""

    record: StudyRecord
    signal: int | None = None  # the signal that interrupted it
    notes: list[str] = field(default_factory=list)  # what MLflow tracking could not log


def steps_of(rows: list[Variant]) -> dict[str, list]:
    """label → the step records of the run each row measured (a row that has not run has none)."""
    return {r.label: RunFolder(Path(r.run_dir)).read_steps() for r in rows
            if r.summary is not None and r.run_dir is not None}


class Staging(NamedTuple):
    """What a kind of study chose to run, once the experiment is prepared and before its
    folder exists (anything that fails on bad input fails then)."""

    rows: list[Variant]  # labelled, each with its candidate and axes; a batch as {"train.batch_size": b}
    fields: dict[str, object]  # the kind's own fields of its record
    experiment: ExperimentConfig | None = None  # what the rows run, when not the experiment itself
    steps: int | None = None  # the steps a row runs (None: the experiment's)


def new_study(record_type: type[S], config: ExperimentConfig,
              choose: Callable[[Prepared], Staging], verbose: bool = False) -> S:
    """A new study of `config` in OUTPUT_DIR/KIND-NAME-TIMESTAMP/, holding the experiment as
    prepared (experiment.yaml: what the data filled in included) and the initial weights
    every row starts from: the model built once under float32 and saved (the guide's
    `initial_weights = model.get_weights()`); with the rows `choose(prepared)` picks, each
    placed in the study's folder (FOLDER/NAME-LABEL) and, at another batch, given the changes
    that run it there (`config.batch_scaling.at_batch`); its record written with every row
    still to run. Rows run in pairs with the baseline when they do not fit in memory
    together. Everything that can fail on bad input, `choose` included, fails before the
    folder exists."""
    from mptrain.data.pipeline import input_ms_per_batch
    from mptrain.model import save_initial_weights
    from mptrain.model.python_builder import check_builder_travels
    from mptrain.runs.experiment import prepare

    kind = record_type.KIND
    check_builder_travels(config, kind)
    if (workers := config.distribute.workers) is not None:
        raise ConfigError(
            f"{config.source}: distribute.workers {workers}: {kind} times each variant as one "
            "process, in turns, and each would start its own local workers; --set "
            f"distribute.workers=null to {kind} the single-process step, and train on workers "
            "with `mptrain run`")
    with tempfile.TemporaryDirectory() as scratch:
        weights = Path(scratch) / "initial_weights.npz"
        prepared = prepare(config, policy="float32", verbose=verbose)
        save_initial_weights(prepared.model, weights)
        chosen = choose(prepared)
        folder = unique_folder(config.output.dir, f"{kind}-{config.name}")
        shutil.move(weights, folder / "initial_weights.npz")
    experiment = chosen.experiment or prepared.config
    write_atomic(folder / "experiment.yaml", prepared.config.yaml_text())  # the experiment as prepared
    if record_type.STAGED != "experiment.yaml":  # what the rows run (plan's trial.yaml; compare's: it)
        write_atomic(folder / record_type.STAGED, experiment.yaml_text())
    run_steps = planned_steps(prepared.config.train, prepared.batches.steps_per_epoch)
    examples = prepared.data.train.size
    rows = [row.model_copy(update={
        "run_dir": str(folder / f"{config.name}-{file_label(row.label)}"),
        "batch": at_batch(experiment, row.batch_size, run_steps, examples) if row.batch else {}})
        for row in chosen.rows]
    baseline = chosen.fields.get("baseline", "float32")
    record = record_type(
        experiment=config.name, folder=str(folder), status="running",
        turn_steps=turn_steps(chosen.steps or run_steps),
        input_ms_per_batch=input_ms_per_batch(prepared.batches),
        pairs=too_big_together(prepared, {r.label: (r.candidate.policy, r.batch_size) for r in rows},
                               baseline),
        **{record_type.ROWS: rows}, **chosen.fields)
    record.write()
    return record


def run_study(record: S, telling: Telling = LOGGED, verbose: bool = False,
              as_text: Callable[[S], str] | None = None, deadline: float | None = None) -> Measurement:
    """The rows still to run (`engine.to_run`), in turns, in one session (`engine.run_rows`:
    the record rewritten as each ends, with its per-round step times, so every verdict can be
    recomputed from it), no round starting after `deadline` (`time.monotonic()`; None: no
    budget), each row's run nested in the study's MLflow parent run
    (`runs.tracking.start_parent`); then judged and closed (`StudyRecord.closed`): KIND.json,
    KIND.png, and the parent run ended with both and, given `as_text(record)`, its tables as
    text."""
    from mptrain.runs.tracking import start_parent

    if (done := record.nothing_left()) is not None:
        raise ConfigError(f"--resume {record.folder}: {done}; nothing to resume")
    folder, kind = Path(record.folder), record.KIND
    tracking = start_parent(folder, kind, record.params())  # a `Connection`, or None (off)
    record = record.model_copy(update={"status": "running"})
    record.write()
    signal = None
    if not past(deadline):
        turns = Turns(record.turn_steps, record.baseline, paired=record.pairs is not None,
                      deadline=deadline, **record.TURNS)
        record, signal = run_rows(record, tracking.env if tracking else {}, turns, telling, verbose)
    record, files, tags = record.closed(signal)
    picture = folder / f"{kind}.png"
    if any(r.summary for r in record.rows):
        record.plot = str(picture)
        record.draw(picture)
    record.write()
    if tracking is None:
        return Measurement(record, signal)
    texts = {f"{kind}.txt": as_text(record)} if as_text else {}
    tracking.finish(record.status, [folder / f"{kind}.json", picture], {**texts, **files}, tags)
    return Measurement(record, signal, tracking.notes)
