"""The rules training follows, on recorded steps (nothing trains): loss-scale skips and
collapse, the divergence guard, stop limits, metrics carried across a resume, signals."""

import math
import os
import signal
from types import SimpleNamespace

import pytest

from mptrain.config.schema import RecoveryConfig
from mptrain.signals import stop_on_signals
from mptrain.training.guard import DivergenceGuard
from mptrain.training.loss_scale import LossScaleTracker
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.records import EpochRecord, StepRecord, TrainingListener


class Recorder(TrainingListener):
    def __init__(self):
        self.steps, self.epochs, self.notices, self.labels = [], [], [], []

    def step_finished(self, record, step_in_epoch):
        self.steps.append(record)

    def epoch_finished(self, record):
        self.epochs.append(record)

    def notice(self, text, label="warning"):
        self.notices.append(text)
        self.labels.append(label)


def step(monitor: TrainingMonitor, loss=1.0, examples=10, metrics=None, scale=None):
    """`scale`: the optimizer's after the step, or several optimizers' by name."""
    monitor.step_begin()
    monitor.step_end(loss, examples, metrics or {},
                     {"optimizer": scale} if isinstance(scale, float) else scale)
    return monitor.steps[-1]


def test_a_lower_scale_is_a_skipped_step_and_a_run_of_them_collapses():
    tracker = LossScaleTracker(1024.0)
    assert [tracker.step(s) for s in (1024.0, 512.0, 512.0, 1024.0, 512.0, 256.0)] == \
        [False, True, False, False, True, True]
    assert tracker.skipped_steps == 3 and tracker.in_a_row == 2
    assert tracker.collapse(3, "epoch 1, step 6") is None
    tracker.step(128.0)
    reason = tracker.collapse(3, "epoch 1, step 7")
    assert "3 steps in a row" in reason and "mixed_bfloat16" in reason and "scale now 128" in reason


def test_the_skip_rate_notice_reaches_listeners_once():
    recorder = Recorder()
    monitor = TrainingMonitor(epochs=1, steps_per_epoch=100, listeners=[recorder],
                              initial_loss_scales={"optimizer": 2.0**20})
    monitor.epoch_begin(0)
    scale = 2.0**20
    for i in range(30):
        scale = scale / 2 if i % 2 else scale  # every other step skipped: 50%
        step(monitor, loss=math.nan if i % 2 else 1.0, scale=scale)
    assert len(recorder.notices) == 1 and "of the last" in recorder.notices[0]
    assert recorder.labels == ["warning"]  # advice, where a rule's doing is a "note"
    assert [r.skipped for r in recorder.steps[:4]] == [False, True, False, True]
    # the skips of the scale coming down from its start (before any step applied) are no rate
    settling = TrainingMonitor(epochs=1, steps_per_epoch=100, listeners=[recorder := Recorder()],
                               initial_loss_scales={"optimizer": 2.0**15})
    settling.epoch_begin(0)
    scale = 2.0**15
    for i in range(20):
        scale = scale / 2 if i < 4 else scale  # four skipped, then every step applied
        step(settling, loss=math.nan if i < 4 else 1.0, scale=scale)
    assert recorder.notices == [] and settling.loss_scale.skipped_steps == 4


def test_step_limits_stop_the_run_and_say_which():
    monitor = TrainingMonitor(epochs=5, steps_per_epoch=10, max_steps=3)
    monitor.epoch_begin(0)
    for _ in range(3):
        step(monitor)
    assert monitor.stop_kind == "max_steps"
    assert monitor.stop_reason == "stopped after 3 steps (step limit 3)"
    slow = TrainingMonitor(epochs=1, steps_per_epoch=10, max_step_seconds=1e-12)
    slow.epoch_begin(0)
    step(slow)
    assert slow.stop_kind is None  # the first step traces and creates kernels: never limited
    step(slow)
    assert slow.stop_kind == "max_step_seconds" and "after 2 steps: a step took" in slow.stop_reason


def test_a_resumed_epoch_reports_the_metrics_of_the_whole_epoch():
    """Stopped after 2 of an epoch's steps (20 examples, running accuracy 0.5), resumed: the
    loop's metrics restart, so after one more step (10 examples at 0.8) the epoch's running
    accuracy is (0.5 * 20 + 0.8 * 10) / 30, and so is the epoch's result. Validation metrics
    are not running means over the epoch: they pass through."""
    history = [StepRecord(1, 1, 1.0, 0.1, 10, metrics={"accuracy": 0.4}),
               StepRecord(2, 1, 1.0, 0.1, 10, metrics={"accuracy": 0.5})]
    monitor = TrainingMonitor(epochs=2, steps_per_epoch=3, history=(history, []))
    monitor.epoch_begin(0, first_step=2)
    record = step(monitor, examples=10, metrics={"accuracy": 0.8})
    assert record.metrics["accuracy"] == pytest.approx(0.6)
    monitor.epoch_end({"accuracy": 0.8, "val_accuracy": 0.3})
    epoch = monitor.epoch_records[-1]
    assert epoch.metrics["accuracy"] == pytest.approx(0.6) and epoch.metrics["val_accuracy"] == 0.3
    assert epoch.steps == 3 and list(epoch.metrics) == ["loss", "accuracy", "val_accuracy"]
    # the next epoch starts afresh
    monitor.epoch_begin(1)
    assert step(monitor, metrics={"accuracy": 0.9}).metrics["accuracy"] == 0.9


class FakeCheckpointer:
    def __init__(self, optimizer=None):
        self.restored, self.suspended, self.optimizer = 0, False, optimizer

    def saved(self):
        return ["ckpt-1"]

    def restore_latest(self):
        self.restored += 1


def guarded(**recovery):
    monitor = TrainingMonitor(epochs=1, steps_per_epoch=100)
    checkpointer = FakeCheckpointer()
    guard = DivergenceGuard(monitor, checkpointer, RecoveryConfig(**recovery), {})
    monitor.listeners = [guard]
    monitor.epoch_begin(0)
    return monitor, checkpointer, guard


def test_divergence_restores_then_gives_up_after_max_trials():
    monitor, checkpointer, guard = guarded(max_trials=2)
    step(monitor, loss=1.0)
    step(monitor, loss=math.nan)
    step(monitor, loss=math.inf)
    assert checkpointer.restored == 2 and not monitor.stop_requested
    step(monitor, loss=math.nan)
    assert monitor.stop_kind == "divergence" and checkpointer.suspended
    assert "after 2 recoveries" in monitor.stop_reason and len(guard.recoveries) == 2


def test_under_loss_scaling_a_skip_is_not_divergence_but_the_bound_still_is():
    """mixed_float16: a NaN loss on a skipped step is the scaler at work; a finite loss above
    train.recovery.loss_upper_bound means what it means under every policy."""
    monitor = TrainingMonitor(epochs=1, steps_per_epoch=100, initial_loss_scales={"optimizer": 1024.0})
    checkpointer = FakeCheckpointer()
    guard = DivergenceGuard(monitor, checkpointer, RecoveryConfig(loss_upper_bound=10.0, collapse_steps=3),
                            {"optimizer": SimpleNamespace(dynamic_scale=512.0)})
    monitor.listeners = [guard]
    monitor.epoch_begin(0)
    step(monitor, loss=math.nan, scale=512.0)  # skipped
    assert checkpointer.restored == 0 and not monitor.stop_requested
    step(monitor, loss=50.0, scale=512.0)  # finite, above the bound, not skipped
    assert checkpointer.restored == 1 and "above train.recovery.loss_upper_bound" in guard.recoveries[0]
    for scale in (256.0, 128.0, 64.0):
        step(monitor, loss=math.nan, scale=scale)
    assert monitor.stop_kind == "divergence" and "loss scale collapsed" in monitor.stop_reason


def test_a_signal_between_epochs_stops_there_and_says_so():
    monitor = TrainingMonitor(epochs=3, steps_per_epoch=2)
    monitor.epoch_begin(0)
    step(monitor)
    step(monitor)  # the epoch's last step: validation would run now
    with stop_on_signals(monitor):
        os.kill(os.getpid(), signal.SIGTERM)
    assert monitor.stop_kind == "signal" and monitor.signal == signal.SIGTERM
    assert monitor.stop_reason == "interrupted by SIGTERM at the end of epoch 1"
    inside = TrainingMonitor(epochs=3, steps_per_epoch=4)
    inside.epoch_begin(0)
    step(inside)
    with stop_on_signals(inside):
        os.kill(os.getpid(), signal.SIGINT)
    assert inside.stop_reason == "interrupted by SIGINT during epoch 1, step 2"
    # before the loop's first epoch began: the epoch the logs and a resume count, never 0
    early = TrainingMonitor(epochs=3, steps_per_epoch=4)
    with stop_on_signals(early):
        os.kill(os.getpid(), signal.SIGINT)
    assert early.stop_reason == "interrupted by SIGINT as epoch 1 began"


def test_after_training_a_sigterm_lets_the_run_finish_writing_and_ctrl_c_abandons():
    """A scheduler's SIGTERM reaching one worker after the others' agreed stop (or a run
    after its last step) has nothing left to stop: it neither cuts the summary nor passes
    for a second Ctrl-C (it once ended a worker as abandoned, exit 130, "stopped on
    SIGINT"); a Ctrl-C there still abandons at once."""
    for stopped_by in (signal.SIGTERM, None):
        monitor = TrainingMonitor(epochs=3, steps_per_epoch=4)
        monitor.epoch_begin(0)
        step(monitor)
        with stop_on_signals(monitor):
            if stopped_by:
                os.kill(os.getpid(), stopped_by)
            reason = monitor.stop_reason
            monitor.trained = True
            os.kill(os.getpid(), signal.SIGTERM)
            assert monitor.stop_reason == reason and monitor.signal == stopped_by
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)


def test_epoch_records_keep_loss_first_and_validation_last():
    monitor = TrainingMonitor(epochs=1, steps_per_epoch=2)
    monitor.epoch_begin(0)
    step(monitor, loss=2.0, examples=30)
    step(monitor, loss=math.nan, examples=10)  # a skipped step's loss is left out of the mean
    monitor.epoch_end({"val_loss": 1.0, "accuracy": 0.5, "loss": 99.0})
    record: EpochRecord = monitor.epoch_records[-1]
    assert record.metrics == {"loss": 2.0, "accuracy": 0.5, "val_loss": 1.0}
    assert list(record.metrics) == ["loss", "accuracy", "val_loss"]


class FakeModel:
    def __init__(self):
        self.loaded, self.saves = None, 0

    def save_weights(self, path):
        path.write_text("weights")
        self.saves += 1

    def load_weights(self, path):
        self.loaded = path


def test_restored_weights_are_named_by_the_epoch_keep_best_wrote_them_at(tmp_path):
    """keep_best's min_delta 0 keeps epoch 3's weights (loss 0.7); early stopping's min_delta
    0.5 would call epoch 1 the best: the note names the epoch the restored file holds."""
    from mptrain.config.schema import TrainConfig
    from mptrain.training.epoch_rules import EpochRules

    train = TrainConfig(epochs=3, keep_best={"monitor": "loss"}, early_stopping={
        "monitor": "loss", "min_delta": 0.5, "patience": 5, "restore_best_weights": True})
    monitor, model = TrainingMonitor(epochs=3, steps_per_epoch=1), FakeModel()
    rules = EpochRules(train, monitor, model, None, tmp_path)
    monitor.listeners = [rules]
    for epoch, loss in enumerate([1.0, 0.8, 0.7]):
        monitor.epoch_begin(epoch)
        step(monitor, loss=loss)
        monitor.epoch_end({})
    assert rules.finish() == ("weights restored from epoch 3 (loss 0.7; "
                              "train.early_stopping.restore_best_weights)")
    assert model.loaded == tmp_path / "best.weights.h5"


def test_an_epoch_a_stop_cut_short_decides_nothing_and_is_never_the_best(tmp_path):
    """Stopped after 1 of epoch 2's 3 steps (its running loss 0.5, better than epoch 1's):
    a resume redoes epoch 2 whole, so the rules act on it then, as an uninterrupted run would
    (they lowered the rate, or kept these weights as the best, on the part)."""
    from mptrain.config.schema import TrainConfig
    from mptrain.training.epoch_rules import EpochRules

    train = TrainConfig(epochs=3, early_stopping={"monitor": "loss", "patience": 1,
                                                  "restore_best_weights": True})
    monitor, model = TrainingMonitor(epochs=3, steps_per_epoch=3, max_steps=4), FakeModel()
    rules = EpochRules(train, monitor, model, None, tmp_path)
    monitor.listeners = [rules]
    for epoch, loss in enumerate([1.0, 0.5]):
        monitor.epoch_begin(epoch)
        while not monitor.stop_requested and not monitor.epoch_complete:
            step(monitor, loss=loss)
        monitor.epoch_end({})
    assert model.saves == 1 and monitor.stop_kind == "max_steps"
    assert rules.finish().startswith("weights restored from epoch 1 (loss 1;")


def test_what_is_reported_is_saved_first_in_whatever_order_listeners_are_given():
    """The records, then the guard and the epoch rules, then the checkpoint, then whatever
    reports (telemetry, progress, turns), each kind in its phase however the session lists
    them: a checkpoint before its epoch's record, or a diverged step saved as good, would
    follow from a list reordered."""
    from mptrain.report.progress import LiveProgress
    from mptrain.runs.folder import RunFolder
    from mptrain.training.checkpoints import Checkpointer
    from mptrain.training.epoch_rules import EpochRules
    from mptrain.training.tensorboard import TensorBoardWriter
    from mptrain.training.turns import TakeTurns

    heard = []

    def listener(kind):
        class Heard(kind):
            def __init__(self):
                pass

            def epoch_finished(self, record):
                heard.append(kind.__name__)
        return Heard()

    kinds = [TakeTurns, LiveProgress, TensorBoardWriter, Checkpointer, EpochRules, DivergenceGuard,
             RunFolder]
    monitor = TrainingMonitor(epochs=1, steps_per_epoch=1)
    monitor.listen(*(listener(kind) for kind in kinds[:3]))
    monitor.listen(*(listener(kind) for kind in kinds[3:]))  # the savers after: put first
    for each in monitor.listeners:
        each.epoch_finished(None)
    assert heard == ["RunFolder", "EpochRules", "DivergenceGuard", "Checkpointer", "TakeTurns",
                     "LiveProgress", "TensorBoardWriter"]


def test_workers_agree_on_the_most_pressing_signal_any_of_them_got():
    """The custom loop's step reduces, with the loss, the share of workers SIGINT and SIGTERM
    reached; every worker stops for the same one (one exit code), SIGTERM over SIGINT."""
    import signal

    from mptrain.training.custom_loop import agreed_signal

    assert agreed_signal((0.0, 0.0)) == 0
    assert agreed_signal((0.5, 0.0)) == signal.SIGINT
    assert agreed_signal((0.0, 0.5)) == agreed_signal((0.5, 0.5)) == signal.SIGTERM
