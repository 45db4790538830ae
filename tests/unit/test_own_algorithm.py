"""A model's own training algorithm, on built models and recorded figures (nothing trains):
every optimizer it holds scaled, which ones its step scaled, what its step reports and which
of it is its loss, how it is judged, what mptrain refuses to accept and ignore, data without
labels, and the FLOPs of its sub-models."""

import math
from types import SimpleNamespace

import keras
import numpy as np
import pytest

from mptrain.config import ExperimentConfig
from mptrain.errors import ConfigError
from mptrain.measure.variant import Speed, Verdict
from mptrain.model.own_step import check_own_step, optimizers_of, sub_models
from mptrain.objective import OwnStep, label_stats
from mptrain.runs.summary import quality_of
from mptrain.training.fit_loop import StepFigures
from mptrain.training.loss_scale import ScalingWatch, scale_every_optimizer
from mptrain.training.monitor import TrainingMonitor
from mptrain.training.records import run_status


class TwoSided(keras.Model):
    """A GAN's shape: two sub-models, a compile of its own storing two optimizers."""

    def __init__(self):
        super().__init__()
        self.left = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4)], name="left")
        self.right = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="right")

    def compile(self, left_optimizer, right_optimizer):
        super().compile()
        self.left_optimizer, self.right_optimizer = left_optimizer, right_optimizer

    def train_step(self, data):
        return {}


def two_sided(compiled: bool = True) -> TwoSided:
    model = TwoSided()
    if compiled:
        model.compile(keras.optimizers.Adam(), keras.optimizers.SGD())
    return model


def test_every_optimizer_a_model_holds_is_scaled_with_the_experiments_settings():
    """Under mixed_float16 each optimizer its compile stored (and the `optimizer` Keras'
    compile made) is wrapped, on the model under its own name, with the experiment's initial
    scale and growth; one Keras wrapped already is wrapped anew around its inner optimizer."""
    model = two_sided()
    adam = model.left_optimizer
    model.optimizer = keras.optimizers.LossScaleOptimizer(model.optimizer)
    scaling = scale_every_optimizer(model, 1024.0, 7)
    assert list(scaling) == ["optimizer", "left_optimizer", "right_optimizer"]
    for name, wrapped in scaling.items():
        assert getattr(model, name) is wrapped and isinstance(wrapped, keras.optimizers.LossScaleOptimizer)
        assert wrapped.initial_scale == 1024.0 and wrapped.dynamic_growth_steps == 7
        assert not isinstance(wrapped.inner_optimizer, keras.optimizers.LossScaleOptimizer)
    assert model.left_optimizer.inner_optimizer is adam and optimizers_of(model) == scaling
    assert list(sub_models(model)) == ["left", "right"]


def test_the_watch_names_each_optimizer_applied_without_its_loss_scaled():
    """What a traced step did: `left` scaled then applied, `right` applied unscaled, `spare`
    never applied (a GAN's unused `optimizer`): only `right` is named."""
    calls = []

    def fake(name):
        return SimpleNamespace(scale_loss=lambda loss: loss * 2, apply=lambda *a, **k: calls.append(name))

    optimizers = {name: fake(name) for name in ("left", "right", "spare")}
    watch = ScalingWatch(optimizers)
    assert optimizers["left"].scale_loss(3.0) == 6.0
    optimizers["left"].apply([], [])
    optimizers["right"].apply([], [])
    optimizers["right"].apply([], [])
    assert calls == ["left", "right", "right"]  # the optimizers' own methods still run
    assert watch.applied == ["left", "right"] and watch.unscaled() == ["right"]


def test_what_a_step_reports_and_which_of_it_is_its_loss():
    """Keras' own step: its `loss`. A distiller's: a `loss` Keras' tracker never counted
    (0.0 in Keras' logs) left out, and the step's loss the sum of those it reports. A step
    that reports no loss at all: the sum of its figures (their finiteness is what it says)."""
    counted = SimpleNamespace(count=SimpleNamespace(numpy=lambda: 64.0))
    uncounted = SimpleNamespace(count=SimpleNamespace(numpy=lambda: 0.0))
    own = StepFigures(SimpleNamespace(metrics=[]))
    own.tracker = counted
    assert own.read({"loss": 0.5, "accuracy": 0.9}) == (0.5, {"accuracy": 0.9}) and own.described == "loss"
    own.tracker = uncounted
    loss, figures = own.read({"accuracy": 0.9, "distillation_loss": 0.25, "loss": 0.0, "student_loss": 1.0})
    assert loss == 1.25 and figures == {"accuracy": 0.9, "distillation_loss": 0.25, "student_loss": 1.0}
    assert own.described == "distillation_loss + student_loss"
    assert own.kept({"loss": 0.0, "student_loss": 1.0}) == {"student_loss": 1.0}
    loss, _ = own.read({"psnr": 20.0, "ssim": math.nan})
    assert math.isnan(loss) and own.described == "psnr + ssim"


def test_a_run_without_evaluation_is_judged_by_its_steps_and_one_evaluated_by_its_losses():
    steps = [SimpleNamespace(loss=1.0)] * 3
    assert run_status(steps, None, None) == "finished"  # a GAN: no test_step, no call
    assert run_status([SimpleNamespace(loss=math.nan)] * 5, None, None) == "diverged"
    assert run_status(steps, {"accuracy": 0.9, "student_loss": 0.4}, None) == "finished"
    assert run_status(steps, {"accuracy": 0.9, "student_loss": math.inf}, None) == "diverged"
    assert run_status(steps, {"accuracy": 0.9}, None) == "finished"  # no loss on its test set
    assert run_status(steps, {}, None) == "diverged"  # evaluated, and nothing came back


def test_the_model_is_judged_by_its_compiled_metric_or_train_monitor_and_a_gan_by_nothing():
    stats = label_stats(np.arange(40) % 4, np.arange(50) % 4, "test")
    distiller = OwnStep("Distiller", {"metrics": [keras.metrics.SparseCategoricalAccuracy()]}, stats)
    assert distiller.describe() == "Distiller's own training step (4 classes)"
    figures = {"sparse_categorical_accuracy": 0.8, "student_loss": 0.6}
    judged = quality_of(distiller, figures)
    assert (judged.metric, judged.value, judged.higher_is_better) == \
        ("sparse_categorical_accuracy", 0.8, True)
    by_loss = quality_of(distiller, figures, monitor="student_loss")
    assert (by_loss.metric, by_loss.value, by_loss.higher_is_better) == ("student_loss", 0.6, False)
    gan = OwnStep("GAN", {}, None)
    assert gan.describe() == "GAN's own training step (no labels)"
    assert quality_of(gan, {"d_loss": 0.6, "g_loss": 0.9}) is None
    assert quality_of(gan, {"d_loss": 0.6, "g_loss": 0.9}, monitor="g_loss").value == 0.9
    assert "quality not judged" in Verdict(speed=Speed(ratio=1.3, word="faster"), unjudged=True).words()


def test_each_optimizers_scale_is_followed_on_its_own():
    """Two optimizers under loss scaling: each one's skips counted, the step skipped when
    either skipped, each one's scale in the record; an unused one (never reported) dropped;
    a resumed run starts each from its last step's scale, not the optimizer's initial one."""
    monitor = TrainingMonitor(epochs=1, steps_per_epoch=10, initial_loss_scales={
        "optimizer": 32768.0, "d_optimizer": 1024.0, "g_optimizer": 1024.0})
    monitor.epoch_begin(0)
    for d, g in ((1024.0, 1024.0), (512.0, 1024.0), (512.0, 512.0), (512.0, 512.0)):
        monitor.step_begin()
        monitor.step_end(1.0, 8, {}, {"d_optimizer": d, "g_optimizer": g})
    assert list(monitor.loss_scales) == ["d_optimizer", "g_optimizer"]
    assert [r.skipped for r in monitor.steps] == [False, True, True, False]
    assert monitor.steps[2].loss_scales == {"d_optimizer": 512.0, "g_optimizer": 512.0}
    assert monitor.steps[2].loss_scale == 512.0  # the first's
    skipped = {name: tracker.skipped_steps for name, tracker in monitor.loss_scales.items()}
    assert skipped == {"d_optimizer": 1, "g_optimizer": 1}
    resumed = TrainingMonitor(epochs=1, steps_per_epoch=10, history=(monitor.steps, []),
                              initial_loss_scales={"optimizer": 32768.0, "d_optimizer": 1024.0,
                                                   "g_optimizer": 1024.0})
    assert {n: t.scale for n, t in resumed.loss_scales.items()} == {
        "optimizer": 32768.0, "d_optimizer": 512.0, "g_optimizer": 512.0}


def test_a_compile_of_its_own_is_kept_and_what_it_would_ignore_is_refused():
    config = ExperimentConfig(name="own", model={"kind": "python", "builder": "own.py:build"})
    assert "its own TwoSided.train_step" in check_own_step(config, two_sided())[0]
    with pytest.raises(ConfigError, match=r"defines its own compile \(TwoSided.compile\(left_optimizer, "
                                          r"right_optimizer\)\), not compiled"):
        check_own_step(config, two_sided(compiled=False))
    for key, value in (("optimizer", {"name": "sgd"}), ("loss", "mse"), ("class_weight", {0: 2.0}),
                       ("xla_optimizer_update", True)):
        changed = config.model_copy(update={"train": config.train.model_copy(update={key: value})})
        with pytest.raises(ConfigError, match=rf"^train.{key}: TwoSided was compiled by its own "
                                              r".*left_optimizer, right_optimizer"):
            check_own_step(changed, two_sided())


def test_data_without_labels_are_batches_of_inputs(tmp_path):
    """An .npz of x arrays alone, a folder of images without class sub-folders, and any data
    with `data.labels: false`: no labels, and the pipeline's batches are the inputs alone."""
    from PIL import Image

    from mptrain.config.kinds import ImageFolderData, NpzData, SyntheticData
    from mptrain.data import load_dataset
    from mptrain.data.pipeline import make_batches

    np.savez(tmp_path / "x.npz", x_train=np.ones((10, 4), np.float32), x_test=np.ones((4, 4), np.float32))
    alone = load_dataset(NpzData(dataset="npz", path=tmp_path / "x.npz"), 0)
    assert alone.labels is None and alone.train.size == 10
    config = ExperimentConfig(name="x", train={"batch_size": 5})
    batch = next(iter(make_batches(alone, config, None).train))
    assert not isinstance(batch, tuple) and tuple(batch.shape) == (5, 4)
    (tmp_path / "flat").mkdir()
    for i in range(12):
        Image.fromarray(np.full((6, 6, 3), 20 * i, np.uint8)).save(tmp_path / "flat" / f"{i}.png")
    flat = load_dataset(ImageFolderData(dataset="image_folder", path=tmp_path / "flat"), 0)
    assert flat.labels is None and flat.train.size + flat.test.size == 12
    assert "classes.txt" not in flat.files
    dropped = load_dataset(SyntheticData(train_size=20, test_size=8, input_shape=[3], labels=False), 0)
    assert dropped.labels is None and "labels left out (data.labels: false)" in dropped.notes[-1]


def test_a_model_of_sub_models_is_counted_as_its_sub_models_and_says_so():
    from mptrain.model.flops import forward_profile

    profile = forward_profile(two_sided())
    assert profile.sub_models == ("left", "right")
    assert profile.flops == 2 * (3 * 4) + 2 * (4 * 2)  # each Dense once per example
    assert "FLOPs per example are those of left, right" in profile.notes()[0]


def test_a_gans_losses_judge_no_progress_and_its_verdict_says_quality_is_not_judged():
    """compare's and plan's judgement of a run whose step reports no loss of its own (the
    step's loss is d_loss + g_loss): a variant falling behind on that sum is not "loss
    behind float32's", no time to target is read from it, and the verdict says its quality
    is not judged; the same records as a model's own `loss` are judged as ever."""
    from mptrain.measure.verdicts import Steps, judge
    from tests.helpers import compare_row, make_summary, step_records

    def records(losses):
        return [r.__class__(**{**r.__dict__, "loss": loss})
                for r, loss in zip(step_records(*[(0.1, 64)] * len(losses)), losses, strict=True)]

    falling, flat = records([2.0 - 0.1 * i for i in range(10)]), records([2.0] * 10)
    for step_loss, judged in (("d_loss + g_loss", False), ("loss", True)):
        summaries = [make_summary(step_loss=step_loss, quality=None, test_accuracy=None) for _ in range(2)]
        base, row = (compare_row(p, summary=s) for p, s in zip(("float32", "mixed_bfloat16"), summaries,
                                                               strict=True))
        verdict = judge(row, base, Steps(falling, flat))
        assert (verdict.training is not None, verdict.to_target is not None) == (judged, judged)
        assert ("loss behind float32's" in verdict.refused) == judged
        assert ("quality not judged" in verdict.words()) != judged
