"""`mptrain run`'s decisions before anything trains, on files and stand-ins (no TensorFlow, no
process): where a run trains (`runs.launch`), which folder it writes (`RunFolder.for_run`),
and what the loaded data fills in or refuses (`model.checks.fit_to_data`)."""

import re
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from mptrain.config import validate
from mptrain.data.dataset import Dataset, InputSpec, Split
from mptrain.errors import ConfigError, DataError, MptrainError
from mptrain.model.checks import fit_to_data, objective_of
from mptrain.objective import label_stats
from mptrain.runs import launch as launching
from mptrain.runs.folder import RunFolder
from mptrain.runs.launch import RunOptions, launch
from mptrain.runs.runner import Start
from mptrain.telling import Telling
from tests.helpers import tiny_raw


@pytest.fixture
def experiment(tmp_path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(tiny_raw(f"output.dir={tmp_path / 'runs'}")))
    return path


@pytest.fixture
def trained(monkeypatch) -> dict:
    """What reached each way of training, instead of training."""
    seen: dict = {}
    monkeypatch.setattr(launching, "run_experiment",
                        lambda config, start, **kw: seen.setdefault("here", (config, start, kw)))
    monkeypatch.setattr(launching, "run_local_workers",
                        lambda run, restarts, on_restart: seen.setdefault("workers", (run, restarts)))
    return seen


def test_a_run_trains_here_with_its_overrides_and_names_the_plan_beside_it(experiment, trained):
    (experiment.parent / "exp.plan.yaml").write_text("# mptrain plan for tiny: float32.\n")
    told: list[tuple[str, str]] = []

    class Told(Telling):
        def say(self, kind: str, line: str) -> None:
            told.append((kind, line))

    launch(str(experiment), RunOptions(overrides=["train.epochs=1", "policy=auto"]), Told())
    config, _, _ = trained["here"]
    assert config.train.epochs == 1 and "workers" not in trained
    beside = f"{experiment.parent / 'exp.plan.yaml'}: mptrain plan for tiny: float32."
    assert told == [("plan", beside)]
    told.clear()  # under a policy of its own, the plan is named as not followed
    launch(str(experiment), RunOptions(overrides=["policy=mixed_bfloat16"]), Told())
    not_followed = " (not followed: this experiment's policy is mixed_bfloat16, not auto)"
    assert told == [("plan", beside + not_followed)]


def test_a_python_caller_without_progress_hears_warnings_through_logging(experiment, trained, caplog):
    """`progress=False` gives the library's default telling: what would be printed goes to
    the "mptrain" logger, a known-slow policy at WARNING, so it is never said nowhere."""
    from types import SimpleNamespace

    from mptrain.telling import LOGGED

    (experiment.parent / "exp.plan.yaml").write_text("# mptrain plan for tiny: float32.\n")
    with caplog.at_level("INFO", logger="mptrain"):
        launch(str(experiment), RunOptions(overrides=["policy=auto"]))
        LOGGED.started(SimpleNamespace(speed_warning="bfloat16 is slower than float32 on this "
                                                     "CPU: bfloat16 kernels run 0.53x float32"),
                       ["what mptrain did"])
        LOGGED.say("note (mixed_bfloat16-fit)", "slower here")
    levels = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("INFO", f"plan: {experiment.parent / 'exp.plan.yaml'}: mptrain plan for tiny: float32.") in levels
    assert ("WARNING", "warning: bfloat16 is slower than float32 on this CPU: bfloat16 kernels run "
                       "0.53x float32") in levels
    assert ("WARNING", "note (mixed_bfloat16-fit): slower here") in levels


def test_run_steps_and_epochs_are_the_keys_they_stand_for(experiment, trained):
    from mptrain.commands.options import length_overrides

    assert length_overrides(2, 16) == ["train.epochs=2", "train.max_steps=16"]
    launch(str(experiment), RunOptions(overrides=length_overrides(None, 16)))
    config, _, _ = trained["here"]
    assert config.train.max_steps == 16 and config.train.epochs == 3


def test_workers_n_trains_on_local_workers_which_are_told_what_it_means(experiment, trained):
    launch(str(experiment), RunOptions(overrides=["train.loop=custom"], workers=2, max_restarts=1))
    run, restarts = trained["workers"]
    assert (run.count, restarts, "here" in trained) == (2, 1, False)
    assert run.overrides == ["train.loop=custom", "distribute.strategy=multi_worker_mirrored",
                             "distribute.workers=2"]
    assert run.run_dir.parent == experiment.parent / "runs" and run.run_dir.is_dir()
    trained.clear()  # the built-ins' loop is fit: the option says what to add, not the schema
    with pytest.raises(ConfigError, match="^--workers 2: .*Model.fit does not run .*: add --set "
                                          "train.loop=custom$"):
        launch(str(experiment), RunOptions(workers=2))
    assert trained == {}


def test_a_supervised_worker_trains_here_and_max_restarts_needs_workers(experiment, trained):
    launch(str(experiment), RunOptions(["train.loop=custom"], workers=2, supervised=True))
    assert "here" in trained and "workers" not in trained
    trained.clear()
    with pytest.raises(ConfigError, match="--max-restarts .* needs --workers N"):
        launch(str(experiment), RunOptions(max_restarts=2))
    assert trained == {}


def test_a_builder_passed_from_python_is_refused_before_local_workers_start(experiment, trained):
    """Each local worker is a process of its own, which cannot see the function: refused
    once, up front, whether the workers come from `workers=2` or the experiment's own
    distribute.workers (they used to start, and each failed on its own)."""
    from mptrain.api import load_experiment
    from mptrain.config import variant

    def my_model(input_shape, num_classes):
        raise AssertionError("never built: no worker starts")

    config = load_experiment(str(experiment), {"train.loop": "custom"}, builder=my_model)
    on_workers = variant(config, {"distribute.strategy": "multi_worker_mirrored", "distribute.workers": 2})
    for given, options in ((config, RunOptions(workers=2)), (on_workers, RunOptions())):
        with pytest.raises(ConfigError, match="exists only in the process that passed it, and "
                                              "run --workers runs"):
            launch(given, options)
    assert trained == {} and not (experiment.parent / "runs").exists()


def test_an_experiment_from_python_reaches_local_workers_as_its_file_and_changes(experiment, trained):
    """Given as an object, it is relayed as its own file and the --set options that make it
    again: a worker's experiment keeps its source (the plan beside it, for `policy: auto`;
    its errors name it). One without a file (a mapping) is written to a file while they run."""
    from mptrain.api import load_experiment
    from mptrain.config import load_config, variant

    config = load_experiment(str(experiment), {"train.epochs": 1, "train.loop": "custom",
                                               "policy": "auto", "model.hidden_units": [16, 8]})
    launch(config, RunOptions(workers=2))
    run, _ = trained["workers"]
    again = load_config(run.config, run.overrides)
    assert run.config == str(experiment) == again.source
    wanted = variant(config, {"distribute.strategy": "multi_worker_mirrored", "distribute.workers": 2})
    assert again.to_yaml_dict() == wanted.to_yaml_dict()

    trained.clear()
    launch(load_experiment(yaml.safe_load(experiment.read_text()), {"train.loop": "custom"}),
           RunOptions(workers=2))
    run, _ = trained["workers"]
    assert run.config.endswith("tiny.yaml") and not Path(run.config).exists()  # gone after the run


def test_a_cluster_trains_multi_worker_mirrored_and_a_resume_of_another_strategy_is_refused(
        experiment, trained, monkeypatch, tmp_path):
    """A cluster (here a scheduler's $TF_CONFIG, with --hosts) trains the experiment under
    multi_worker_mirrored; a run resumed on one cannot change its strategy, and the refusal
    names where the cluster came from and the strategy, not an option the user never gave."""
    from mptrain.training.cluster import Hosts

    hosts = Hosts(("127.0.0.1:1", "127.0.0.2:1"), 0)
    monkeypatch.setenv("TF_CONFIG", hosts.tf_config())
    launch(str(experiment), RunOptions(["train.loop=custom"], hosts=hosts))
    config, _, _ = trained["here"]
    assert config.distribute.strategy == "multi_worker_mirrored" and config.source == str(experiment)
    trained.clear()  # a fit loop is refused by what asked for workers, not by the schema
    with pytest.raises(ConfigError, match=r"^a cluster \(the cluster comes from \$TF_CONFIG .*\): .*"
                                          r"Model.fit does not run .*: add --set train.loop=custom$"):
        launch(str(experiment), RunOptions(hosts=hosts))
    assert trained == {}

    run_dir = tmp_path / "stopped-run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(config.model_copy(
        update={"distribute": config.distribute.model_copy(update={"strategy": "mirrored"})}).to_yaml_dict()))
    trained.clear()
    with pytest.raises(ConfigError, match=r"cannot resume .*stopped-run on a cluster \(the cluster "
                                          r"comes from \$TF_CONFIG .*distribute.strategy mirrored, .*"
                                          r"without --hosts, Slurm's srun or \$TF_CONFIG"):
        launch(None, RunOptions(hosts=hosts, start=Start(resume=run_dir)))
    assert trained == {}


def test_the_folder_a_run_writes(tmp_path):
    resumed = tmp_path / "old-run"
    (resumed / "checkpoints").mkdir(parents=True)
    (resumed / "checkpoints" / "ckpt-5.index").write_text("")
    (resumed / "steps.jsonl").write_text("{}\n")

    folder, scratch = RunFolder.for_run(True, tmp_path / "runs", "tiny")
    assert scratch is None and folder.path.parent == tmp_path / "runs" and folder.path.is_dir()
    folder, scratch = RunFolder.for_run(True, tmp_path / "runs", "tiny", resume=resumed)
    assert (folder.path, scratch) == (resumed, None)
    folder, scratch = RunFolder.for_run(True, tmp_path / "runs", "tiny", run_dir=tmp_path / "named")
    assert (folder.path, scratch) == (tmp_path / "named", None)

    # another worker trains into its own scratch folder, never into the run's
    folder, scratch = RunFolder.for_run(False, tmp_path / "runs", "tiny")
    assert scratch is not None and folder.path.parent == scratch
    folder, scratch = RunFolder.for_run(False, tmp_path / "runs", "tiny", resume=resumed)
    assert folder.path == scratch / "old-run" and (folder.path / "steps.jsonl").is_file()
    # what no run can start in is said, naming the folder (it was a raw traceback)
    shutil.rmtree(resumed / "checkpoints")
    with pytest.raises(MptrainError, match=f"cannot resume {resumed}: it has no checkpoint on "
                                           "this host .*give every host the run folder"):
        RunFolder.for_run(False, tmp_path / "runs", "tiny", resume=resumed)
    (tmp_path / "named" / "config.yaml").write_text("")
    with pytest.raises(MptrainError, match="named: a run folder must start empty, and this one holds "
                                           "config.yaml"):
        RunFolder.for_run(True, tmp_path / "runs", "tiny", run_dir=tmp_path / "named")


def _data(labels: list, size: int = 8) -> Dataset:
    y = np.array(labels)
    split = Split(size, arrays=(np.zeros((size, 16), np.float32), y))
    return Dataset(split, None, split, InputSpec((16,), "vector"), label_stats(y, y, "data.npz"),
                   "data.npz")


def _fitted(config, data):
    objective, _ = objective_of(config, data.labels)
    return fit_to_data(config, data, objective)


def test_the_loaded_data_fills_in_the_head_or_is_refused_naming_the_file():
    """The head's width is what the objective reads in the labels: the classes, the 0/1
    labels, the targets; labels the loss cannot take are refused, naming the data."""
    config = validate(tiny_raw("model.num_classes=null", "train.batch_size=4"), "exp.yaml")
    assert _fitted(config, _data([0, 1, 2, 5] * 2)).model.num_classes == 6
    tags = validate(tiny_raw("model.num_classes=null", "train.batch_size=4",
                             "train.loss=binary_crossentropy"), "exp.yaml")
    assert _fitted(tags, _data([[0, 1, 1], [1, 0, 0]] * 4)).model.num_classes == 3
    targets = validate(tiny_raw("model.num_classes=null", "train.batch_size=4",
                                "train.loss=mean_squared_error"), "exp.yaml")
    assert _fitted(targets, _data([[0.5, 2.0]] * 8)).model.num_classes == 2

    four = validate(tiny_raw("train.batch_size=4"), "exp.yaml")
    assert _fitted(four, _data([0, 1, 2, 3] * 2)) == four
    named = f"^{re.escape(four.source)}: "  # the experiment file, as validate's errors name it
    with pytest.raises(DataError, match=named + "data.npz: labels go up to 5 but model.num_classes is 4"):
        _fitted(four, _data([0, 5] * 4))
    with pytest.raises(ConfigError, match=named + "train.batch_size 64 is larger than the 8"):
        _fitted(validate(tiny_raw(), "exp.yaml"), _data([0, 1] * 4))
    with pytest.raises(DataError, match="data.npz: labels must be class ids .* values that are not "
                                        "whole numbers; for values to predict use a regression"):
        objective_of(four, _data([0.5, 1.5] * 4).labels)
    with pytest.raises(DataError, match="every training example has the same class"):
        objective_of(four, _data([3] * 8).labels)
