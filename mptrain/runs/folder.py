"""The run folder: the one place that decides where a run's files go and writes them.

`OUTPUT_DIR/<name>-<timestamp>/` holds config.yaml (resolved), summary.json, metrics.jsonl
(one line per epoch), steps.jsonl (one line per step), checkpoints/ and model.keras.

Nothing in it may mislead after a crash, a kill or a power cut: every file is written to a
temporary name and moved into place (`os.replace` is atomic), JSON-lines are appended whole
and flushed, and summary.json always says what state the run is in: `running` (with the
process id, so a dead run is recognisable), `finished`, `interrupted`, `diverged` or `failed`.

The run folders in a folder (`mptrain runs`, `list_runs`): compare and plan keep their runs
one level down (compare-*/, plan-*/). A folder still `running` whose process is gone from
this host was killed (SIGKILL, a power cut); killed, interrupted and failed runs with a
checkpoint are resumable (`mptrain run --resume`). Putting chosen runs side by side is
`measure.side_by_side`.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import socket
import tempfile
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import ValidationError

from mptrain.errors import ConfigError, DataError, MptrainError
from mptrain.hardware.machine import LIBRARY_NAMES
from mptrain.precision.candidates import candidate_name
from mptrain.record import Record, append_lines, read_jsonl, to_json, write_atomic
from mptrain.runs.summary import RUN_RECORD, RunRecord, RunState, RunSummary
from mptrain.training.records import CUT_SHORT, EpochRecord, Phase, StepRecord, TrainingListener

if TYPE_CHECKING:
    from mptrain.config import ExperimentConfig
    from mptrain.precision.policy import PolicyChoice


SCRATCH = "mptrain-worker-"  # a non-chief worker's scratch folder: SCRATCH + its pid + "-..."


def sweep_scratch() -> None:
    """Remove the scratch folders workers killed outright left in the temporary folder (their
    process gone: a SIGKILL skips the cleanup), checkpoints and all, before a worker makes its
    own."""
    for left in Path(tempfile.gettempdir()).glob(f"{SCRATCH}*"):
        pid = left.name.removeprefix(SCRATCH).split("-")[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            shutil.rmtree(left, ignore_errors=True)


def pid_alive(pid: int) -> bool:
    """Whether a process of this host exists. One that may not be signalled (another user's,
    or another container's UID) exists too: taking it for dead would start a second run
    writing its folder, or remove a live worker's scratch."""
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True
    except (ProcessLookupError, ValueError, OverflowError):
        return False
    return True


class RunFolder(TrainingListener):
    phase = Phase.RECORD

    def __init__(self, path: Path):
        self.path = path
        self._pending_steps: list[StepRecord] = []

    @classmethod
    def for_run(cls, chief: bool, parent: Path, name: str, resume: Path | None = None,
                run_dir: Path | None = None) -> tuple[RunFolder, Path | None]:
        """The folder a run writes into: the run it resumes, the folder compare or plan named
        (`run_dir`), or a new one in `parent`; and the scratch folder a worker other than the
        chief trains into (None for the chief, the one that writes the run)."""
        if chief:
            if resume is not None:
                return cls(resume), None
            if run_dir is not None:
                return cls.create_at(run_dir), None
            return cls(unique_folder(parent, name)), None
        if resume is not None and last_checkpoint(resume) is None:
            raise MptrainError(f"cannot resume {resume}: it has no checkpoint on this host (the "
                               "run stopped before its first one, or this host does not see the "
                               "chief's run folder); give every host the run folder, or start the "
                               "run again")
        sweep_scratch()
        scratch = Path(tempfile.mkdtemp(prefix=f"{SCRATCH}{os.getpid()}-"))
        if resume is None:
            return cls(unique_folder(scratch, name)), scratch
        # a resumed run's checkpoints, records and best weights, copied: the same state
        # restored, the same decisions taken, while only the chief writes the run folder
        copy = scratch / resume.name
        shutil.copytree(resume / "checkpoints", copy / "checkpoints")
        for record in ("steps.jsonl", "metrics.jsonl", "best.weights.h5"):
            if (resume / record).exists():
                shutil.copy2(resume / record, copy / record)
        return cls(copy), scratch

    @classmethod
    def create_at(cls, path: Path) -> RunFolder:
        """Exactly this folder, new or empty (compare and plan name their runs' folders in
        advance; `run --workers` reserves one with `unique_folder`, so it knows the folder
        whichever worker is lost)."""
        path.mkdir(parents=True, exist_ok=True)
        if any(path.iterdir()):
            raise MptrainError(f"{path}: a run folder must start empty, and this one holds "
                               f"{', '.join(sorted(p.name for p in path.iterdir())[:3])}; give "
                               "another folder, or empty this one")
        return cls(path)

    # --- files ---------------------------------------------------------------------------

    def write_config(self, config: ExperimentConfig, choice: PolicyChoice) -> None:
        """config.yaml: the experiment as run, `policy: auto` resolved (a resume continues in
        the precision the run started in, whatever `auto` would pick by then), headed by what
        `auto` and the XLA defaults resolved to and why."""
        lines = ["# Resolved experiment, as run by mptrain."]
        if choice.requested != choice.name:
            lines.append(f"# policy: {choice.requested} resolved to {choice.name} ({choice.reason})")
            config = config.model_copy(update={"policy": choice.name})
        lines.append(f"# jit_compile: {choice.jit_compile} ({choice.jit_reason})")
        lines.append(f"# xla_optimizer_update: {choice.xla_optimizer_update} "
                     f"({choice.xla_optimizer_reason})")
        write_atomic(self.path / "config.yaml", "\n".join(lines) + "\n" + config.yaml_text())

    def write_files(self, files: dict[str, str]) -> None:
        """Text the data set hands over (class names, a tokenizer's vocabulary)."""
        for name, text in files.items():
            write_atomic(self.path / name, text)

    def mark_running(self, config_name: str) -> None:
        """summary.json says `running`, with the process id, until the run ends."""
        self.write_summary(RunState(status="running", name=config_name, pid=os.getpid(),
                                    host=socket.gethostname(), started=_now()))

    def write_status(self, status: str, reason: str) -> None:
        """For a run that ended without a full summary: `failed` or abandoned, and why, if the
        disk still takes that much; if not, the folder keeps `running` with a dead pid: still
        recognisably stopped. What was saved (config, records, checkpoints) stays."""
        previous = self.state()
        name = previous.name if previous else self.path.name
        started = previous.started if isinstance(previous, RunState) else _now()
        state = RunState(status=status, name=name, pid=None, host=socket.gethostname(),
                         started=started, ended=_now(), reason=reason)
        with contextlib.suppress(OSError):  # a full disk: the status matters more than records
            self.flush_steps()
        with contextlib.suppress(OSError):  # nor can it take the status: the run stops all the same
            self.write_summary(state)

    def mark_failed(self, exc: BaseException) -> None:
        """summary.json says `failed` and why (`write_status`)."""
        self.write_status("failed", f"{type(exc).__name__}: {exc}")

    def state(self) -> RunRecord | None:
        """summary.json as whichever state it holds; None when there is none (or it is not
        one of ours: a folder that is not a run, or a file damaged beyond reading)."""
        try:
            return RUN_RECORD.validate_json((self.path / "summary.json").read_text())
        except (OSError, ValueError, ValidationError):
            return None

    def write_summary(self, record: RunRecord) -> None:
        """summary.json, in whichever state the run is."""
        write_atomic(self.path / "summary.json", record_text(record))

    def save_model(self, model) -> str | None:
        """model.keras, written atomically. A model Keras cannot serialise (a subclassed
        model without `get_config`: a distiller, a GAN) keeps its training as
        model.weights.h5, and each of its sub-models Keras can serialise as SUB.keras (the
        student, the generator: what is kept of such a model); the returned note says why
        there is no model.keras and how to load what there is (None when there is one)."""
        from mptrain.model.own_step import sub_models

        try:
            _save_atomic(model, self.path / "model.keras")
            return None
        except (NotImplementedError, TypeError, ValueError) as exc:
            reason = first_sentence(str(exc)) or type(exc).__name__
        _save_atomic(model, self.path / "model.weights.h5")
        kept = []
        for name, sub in sub_models(model).items():
            with contextlib.suppress(NotImplementedError, TypeError, ValueError):
                _save_atomic(sub, self.path / f"{name}.keras")
                kept.append(f"{name}.keras")
        subs = (f"; its sub-models {', '.join(kept)} load with keras.models.load_model" if kept else "")
        unbuilt = ", set model.built = True (its sub-models are built)" if sub_models(model) else ""
        return (f"no model.keras: Keras cannot serialise this model ({reason}); its trained weights "
                f"are in model.weights.h5: build the model with your builder{unbuilt}, then "
                f"model.load_weights(PATH){subs}")

    # --- records ---------------------------------------------------------------------------

    def flush_steps(self) -> None:
        """Append the steps recorded since the last flush (called at checkpoints, at each
        epoch's end and at the end: per-step file I/O would tax the training loop, and steps
        after the last checkpoint are redone by a resume anyway)."""
        if self._pending_steps:
            append_lines(self.path / "steps.jsonl", [asdict(r) for r in self._pending_steps])
            self._pending_steps.clear()

    def read_steps(self, said: list[str] | None = None) -> list[StepRecord]:
        """steps.jsonl; `said` is told of a torn last line left out (`read_jsonl`)."""
        return [StepRecord(**{**r, "loss": math.nan if r["loss"] is None else r["loss"]})
                for r in read_jsonl(self.path / "steps.jsonl", said)]

    def read_epochs(self, said: list[str] | None = None) -> list[EpochRecord]:
        return [EpochRecord(**{**r, "metrics": {k: math.nan if v is None else v
                                                for k, v in r["metrics"].items()}})
                for r in read_jsonl(self.path / "metrics.jsonl", said)]

    def records_until(self, steps: int, epochs: int,
                      said: list[str]) -> tuple[list[StepRecord], list[EpochRecord]]:
        """The records a resume keeps, the first `steps` step records and `epochs` epoch
        records (later ones are redone), and the files cut to them; `said` is told of a torn
        last line left out."""
        kept = self.read_steps(said)[:steps], self.read_epochs(said)[:epochs]
        for name, records in (("steps.jsonl", kept[0]), ("metrics.jsonl", kept[1])):
            path = self.path / name
            if path.exists():
                write_atomic(path, "".join(path.read_text().splitlines(keepends=True)[: len(records)]))
        return kept

    # TrainingListener: epoch records are appended as they happen (`tail -f metrics.jsonl`).
    def step_finished(self, record: StepRecord, step_in_epoch: int) -> None:
        self._pending_steps.append(record)

    def epoch_finished(self, record: EpochRecord) -> None:
        self.flush_steps()  # the step log is complete at each epoch's end, checkpoint or not
        append_lines(self.path / "metrics.jsonl", [asdict(record)])


def _save_atomic(model, path: Path) -> None:
    """`model.save` (a .keras path) or `save_weights` (.weights.h5) through a file beside
    `path`, moved into place once whole."""
    staged = path.with_name(f"staged-{path.name}")
    try:
        (model.save_weights if path.name.endswith(".weights.h5") else model.save)(staged)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise
    os.replace(staged, path)


def first_sentence(text: str) -> str:
    """The first sentence of a message, whole, on one line (Keras wraps its messages over
    lines, so their first line can end mid-sentence)."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")


def unique_folder(parent: Path, name: str) -> Path:
    """A new folder `<name>-<timestamp>`, never one that exists: two runs (or compares)
    started in the same second get -2, -3, ... (mkdir is the atomic test)."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    parent.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        path = parent / (f"{name}-{stamp}" if n == 1 else f"{name}-{stamp}-{n}")
        with contextlib.suppress(FileExistsError):
            path.mkdir()
            return path
    raise FileExistsError(f"{parent}: too many folders named {name}-{stamp}")


def last_checkpoint(run_dir: Path) -> int | None:
    """The step of the run's newest whole checkpoint (TensorFlow names its `checkpoint` index
    only once a checkpoint is written), read without TensorFlow; None when it has none."""
    folder = run_dir / "checkpoints"
    try:
        index = (folder / "checkpoint").read_text()
    except OSError:
        index = ""
    named = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', index, re.MULTILINE)
    if named and (folder / f"ckpt-{named[1]}.index").is_file():
        return int(named[1])
    found = (re.fullmatch(r"ckpt-(\d+)\.index", path.name) for path in folder.glob("ckpt-*.index"))
    return max((int(match[1]) for match in found if match), default=None)


def record_text(record: RunRecord) -> str:
    """summary.json's text (MLflow tracking uploads the same)."""
    return to_json(record.model_dump(), indent=2) + "\n"


def resumable(run_dir: Path) -> bool:
    """A run folder with a config and a checkpoint that stopped before its planned end
    (interrupted, killed, or cut short by a plan: its budget, or its race decided)."""
    state = RunFolder(run_dir).state()
    stopped = isinstance(state, RunState) or (isinstance(state, RunSummary) and (
        state.status == "interrupted" or state.stopped_by in CUT_SHORT))
    return stopped and (run_dir / "config.yaml").is_file() and \
        any((run_dir / "checkpoints").glob("ckpt-*.index"))


def alive(state: RunState) -> bool:
    """Whether the process a `running` folder names is alive (on this host: elsewhere we
    cannot tell, and say no; `pid_alive`)."""
    return state.host == socket.gethostname() and bool(state.pid) and pid_alive(state.pid)


# --- the run folders in a folder (`mptrain runs`) ------------------------------------------

DEFAULT_FOLDER = Path("runs")
NESTED = ("compare-", "plan-")  # folders whose runs are listed too

# (a plan's trial its race or budget stopped is "cut short": trained less, not finished)
RunStatus = Literal["finished", "cut short", "interrupted", "diverged", "failed", "running", "killed"]


class RunRow(Record):
    """One run folder, as `mptrain runs` lists it."""

    name: str  # the folder, relative to the folder listed
    path: str
    status: RunStatus
    resumable: bool  # `mptrain run --resume PATH` continues it
    reason: str | None = None  # why it stopped or failed
    policy: str | None = None  # what ran (a run without a summary: what its config asked)
    candidate: str | None = None  # the precision candidate, as plan and compare name it
    loop: str | None = None
    math_library: str | None = None  # the CPU's that ran: oneDNN, Eigen (None: not known, a GPU's run)
    epochs: int | None = None  # epochs run
    median_step_ms: float | None = None
    test_quality: str | None = None  # its objective's test figure, named: "accuracy 0.9123", "MAE 2.41"
    when: str  # when summary.json last changed: the run's start, or its end


class RunsReport(Record):
    folder: str
    runs: list[RunRow]  # newest first


def is_run_folder(path: Path) -> bool:
    return (path / "config.yaml").is_file() and (path / "summary.json").is_file()


def run_folders(folder: Path) -> list[Path]:
    """The run folders in `folder`, and in its compare and plan folders."""
    found = []
    for child in sorted(p for p in folder.iterdir() if p.is_dir()):
        if is_run_folder(child):
            found.append(child)
        elif child.name.startswith(NESTED):
            found += sorted(p for p in child.iterdir() if p.is_dir() and is_run_folder(p))
    return found


def list_runs(folder: Path = DEFAULT_FOLDER) -> RunsReport:
    """Every run folder in `folder` (one whose summary.json is damaged too, said so), newest
    first."""
    if not folder.is_dir():
        raise ConfigError(f"{folder}: no such folder; give the folder your runs are in (an "
                          "experiment's output.dir, by default runs)")
    rows = [run_row(path, folder) for path in run_folders(folder)]
    return RunsReport(folder=str(folder), runs=sorted(rows, key=lambda r: r.when, reverse=True))


def run_row(path: Path, root: Path) -> RunRow:
    run = RunFolder(path)
    state = run.state()
    mtime = (path / "summary.json").stat().st_mtime
    where = dict(name=str(path.relative_to(root)), path=str(path),
                 when=datetime.fromtimestamp(mtime).isoformat(timespec="seconds"))
    if state is None:  # its summary.json does not read: listed as such, not left out
        return RunRow(**where, status="failed",
                      resumable=any((path / "checkpoints").glob("ckpt-*.index")),
                      reason="summary.json cannot be read (damaged); --resume continues from "
                             "the last checkpoint", epochs=_epochs_recorded(run))
    if isinstance(state, RunSummary):
        times = state.step_time
        cut = state.status == "finished" and state.stopped_by in CUT_SHORT
        return RunRow(**where, status="cut short" if cut else state.status, resumable=resumable(path),
                      reason=state.stop_reason, policy=state.policy, loop=state.loop,
                      candidate=state.candidate or state.policy,
                      math_library=LIBRARY_NAMES.get(state.math_library),
                      epochs=state.epochs_run, median_step_ms=times.median_ms if times else None,
                      test_quality=_quality(state))
    status = run_state_status(state)
    config = run_config(path)
    return RunRow(**where, status=status,
                  resumable=status != "running" and resumable(path),
                  reason=state.reason if status != "killed" else
                  f"process {state.pid} on {state.host} is gone",
                  policy=config.policy if config else None,
                  candidate=candidate_name(config) if config else None,
                  loop=config.train.loop if config else None,
                  epochs=_epochs_recorded(run))


def _epochs_recorded(run: RunFolder) -> int | None:
    """How many epochs metrics.jsonl records; None when it is damaged (`--resume` says where):
    one damaged folder does not stop the listing of the others."""
    try:
        return len(run.read_epochs())
    except DataError:
        return None


def run_state_status(state: RunState) -> RunStatus:
    """`running` is only true while its process lives; on another host we cannot check."""
    if state.status != "running":
        return state.status
    return "running" if alive(state) or state.host != socket.gethostname() else "killed"


def run_config(path: Path):
    """The run's config.yaml, validated; None when this version cannot read it."""
    from mptrain.config import validate
    from mptrain.config.loading import read_yaml

    try:
        return validate(read_yaml(path / "config.yaml"), str(path / "config.yaml"))
    except ConfigError:  # a config this version cannot read: the row says less, nothing more
        return None


def _quality(summary: RunSummary) -> str | None:
    """The figure a run's objective is judged by, with its name (an older summary: accuracy)."""
    if summary.quality is not None and summary.quality.value is not None:
        return f"{summary.quality.label} {summary.quality.value:.4g}"
    return f"accuracy {summary.test_accuracy:.4f}" if summary.test_accuracy is not None else None
