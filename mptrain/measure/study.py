"""A study: the variants of one experiment measured side by side, in turns, and judged. That is
what `mptrain compare` and `mptrain plan` each are, and they live one life here.

A new study checks everything, stages the experiment and the initial weights every row starts
from, places its rows in its folder and writes its record (`new_study`). Then `run_study`, the
same for a new study and a resumed one (`StudyRecord.load`), starts its MLflow parent run,
runs the rows still to run in turns (`run_rows`, which makes each row's experiment file and
run folder, hands them to the engine's turns, `engine.run_in_turns`, and rewrites the record as
each ends), judges them and closes the study with its picture and its tables. Compare and
plan differ as data given to `run_rows`, the one sequence both run: which rows, from which
staged experiment, in which turns.

What a kind of study is, is its record's (`CompareRecord`, `PlanRecord`): which rows it runs
(chosen when it is staged), how they take turns (plan stops a trial that cannot win, and holds
a budget), how they are judged, and what is written at the end (plan's experiment file).
"""

from __future__ import annotations

import shutil
import tempfile
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, Literal, NamedTuple, Self, TypeVar

from mptrain.config.batch_scaling import at_batch
from mptrain.errors import ConfigError
from mptrain.measure.engine import Turns, past, run_in_turns, turn_steps
from mptrain.measure.memory import too_big_together
from mptrain.measure.variant import Variant
from mptrain.precision.candidates import file_label
from mptrain.record import Record, to_json, write_atomic
from mptrain.runs.child import ChildSpec
from mptrain.runs.folder import RunFolder, resumable, unique_folder
from mptrain.runs.summary import RunSummary
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
        has ended takes the summary in its run folder (`ended_summary`): a study killed
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

    def turn_rules(self) -> dict[str, object]:
        """The kind's own `Turns` rules: who stops early (none, by default)."""
        return {}

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
    from mptrain.model.kinds.python_builder import check_builder_travels
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
    """The rows still to run (`to_run`), in turns, in one session (`run_rows`:
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
                      deadline=deadline, **record.turn_rules())
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


def run_rows(record, env: dict[str, str], turns: Turns, telling, verbose: bool = False):
    """The one sequence compare and plan run, on a study's record (a `study.StudyRecord`): the
    rows whose runs have not ended (`to_run`; not one that failed, unless
    `turns.rerun_failed`), each the experiment staged in the study's folder (`STAGED`) with
    its own settings, from the initial weights staged there (its run nested in the study's
    MLflow parent run by `env`), in turns in one session. The record is rewritten as each row
    ends, so a parent killed outright loses no row that ended. Returns the record with every
    row back in its order, with what its run measured, and the signal that interrupted them
    (None: none did). Paired (`turns.paired`), each runs in turns with the baseline alone,
    pair after pair (`pairs`), and its `baseline_rounds` are the baseline's in its pair."""
    from mptrain.config import load_config, variant

    folder = Path(record.folder)
    staged = load_config(folder / record.STAGED)
    todo = [row for row in to_run(record.rows) if turns.rerun_failed or row.failed is None]
    ended: dict[str, Variant] = {}  # (a pair's extra baseline too, under a label no row has)

    def as_ended():  # the record with every row as it stands
        return record.model_copy(update={record.ROWS: [ended.get(r.label, r) for r in record.rows]})

    def keep(group: list[Variant], row: Variant) -> None:  # a row as it ends, on disk at once
        if turns.paired and row.label != group[0].label:  # its rounds' baseline: its pair's
            row = row.model_copy(update={"baseline_rounds": ended[group[0].label].rounds})
        ended[row.label] = row
        as_ended().write()

    signal = None
    for group in (pairs(todo, turns.baseline) if turns.paired else [todo]):
        launches = []
        for row in group:
            experiment = variant(staged, {"name": Path(row.run_dir).name, **row.settings})
            launches.append((row, experiment.train.batch_size,
                             spec_for(folder, row, experiment, verbose)))
        # in a pair, each is read against the pair's baseline (the baseline's row, or its copy)
        group_turns = replace(turns, baseline=group[0].label) if turns.paired else turns
        signal = run_in_turns(launches, folder, env, group_turns, telling, partial(keep, group))
        if signal is not None or past(turns.deadline):
            break
    return as_ended(), signal


def pairs(rows: list[Variant], baseline: str) -> list[list[Variant]]:
    """Each variant with the baseline, in turns two by two: the baseline's own row in the
    first pair, a copy of it (its own run folder, `BASELINE with LABEL`) in each other. Without
    the baseline among the rows (a resume after it finished), each runs alone."""
    base = next((r for r in rows if r.label == baseline), None)
    others = [r for r in rows if r.label != baseline]
    if base is None:
        return [[r] for r in others]
    if not others:
        return [[base]]

    def baseline_for(index: int, row: Variant) -> Variant:
        if index == 0:
            return base
        run_dir = Path(base.run_dir)
        return base.model_copy(update={
            "label": f"{base.label} with {row.label}",
            "run_dir": str(run_dir.with_name(f"{run_dir.name}-with-{file_label(row.label)}"))})

    return [[baseline_for(i, r), r] for i, r in enumerate(others)]


def spec_for(folder: Path, row: Variant, experiment: ExperimentConfig, verbose: bool) -> ChildSpec:
    """The variant's run (`runs.child`): a resume when it stopped with a checkpoint (a compare
    or plan resumed), else anew from its own experiment file (variants/LABEL.yaml) and the
    initial weights; its summary written to logs/LABEL.summary.json."""
    run_dir = Path(row.run_dir)
    summary_file = str(folder / "logs" / f"{file_label(row.label)}.summary.json")
    if resumable(run_dir):
        return ChildSpec(run_dir=str(run_dir), resume=True, summary_file=summary_file,
                         verbose=verbose)
    shutil.rmtree(run_dir, ignore_errors=True)  # started, but with nothing to resume
    path = folder / "variants" / f"{file_label(row.label)}.yaml"
    path.parent.mkdir(exist_ok=True)
    write_atomic(path, experiment.yaml_text())
    return ChildSpec(experiment=str(path), run_dir=str(run_dir), summary_file=summary_file,
                     initial_weights=str(folder / "initial_weights.npz"), verbose=verbose)


def to_run(rows: list[Variant]) -> list[Variant]:
    """The rows a compare or plan runs now, one way for both, new or resumed: every row whose
    run has not ended (a resumed record's rows hold their folders' ended summaries:
    `StudyRecord.load`), in a new session of turns; a run stopped with a
    checkpoint continues from it (`spec_for`), one never started starts. Rounds pair only
    within a session, so a row resumed after its baseline ended is judged on the two runs'
    medians (`verdicts.speed`)."""
    session = max((r.session for r in rows if r.summary is not None or r.failed is not None),
                  default=0) + 1
    return [row.model_copy(update={"session": session}) for row in rows
            if not has_ended(row.summary)]


def ended_summary(row: Variant) -> RunSummary | None:
    """The summary in the row's run folder when its run has ended; None while it has not
    (never started, stopped with a checkpoint, or failed)."""
    state = RunFolder(Path(row.run_dir)).state() if row.run_dir else None
    return state if isinstance(state, RunSummary) and has_ended(state) else None


def has_ended(summary: RunSummary | None) -> bool:
    """Whether a run ended for good (finished, or diverged): an interrupted one continues."""
    return summary is not None and summary.status in ("finished", "diverged")
