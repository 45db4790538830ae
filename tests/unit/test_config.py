import contextlib
from pathlib import Path

import pytest
import yaml

from mptrain.config import (
    ExperimentConfig,
    apply_overrides,
    builtin_configs,
    load_config,
    parse_override,
)
from mptrain.errors import ConfigError
from tests.helpers import TINY


def write(tmp_path: Path, data, name="exp.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def error_of(tmp_path: Path, data, overrides=None) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data), overrides)
    return str(info.value)


def test_good_config_round_trips_with_defaults(tmp_path):
    config = load_config(write(tmp_path, TINY))
    assert config.model.hidden_units == [32, 32]
    assert config.train.loss_scale.initial_scale == 2.0**15
    again = ExperimentConfig.model_validate(config.to_yaml_dict())
    assert again.to_yaml_dict() == config.to_yaml_dict()


def test_every_offline_builtin_passes_the_checks_run_makes(tmp_path, monkeypatch):
    """A built-in's own files (python_builder's my_model.py) are found in the package; its
    runs go to the current folder."""
    from mptrain.runs.preflight import check_experiment

    monkeypatch.chdir(tmp_path)
    for name in builtin_configs():
        config = load_config(name)
        assert config.output.dir == tmp_path / "runs", name
        if config.data.dataset == "mnist":
            continue  # needs MNIST: `validate` says so as a note, `run` as an error offline
        check_experiment(config, thorough=True)


def test_every_builtin_config_validates():
    names = builtin_configs()
    assert {"mnist_mixed", "fashion_mnist_mixed", "synthetic", "cnn_fashion_mnist"} <= set(names)
    guide = load_config("mnist_mixed")
    assert (guide.policy, guide.train.batch_size, guide.train.epochs) == ("mixed_float16", 8192, 5)
    assert guide.model.hidden_units == [4096, 4096] and guide.data.validation_split == 0.2
    assert load_config("cnn_fashion_mnist").model.kind == "cnn"


def test_unknown_key_names_path_and_allowed_keys(tmp_path):
    raw = {**TINY, "train": {**TINY["train"], "epoch": 3}}
    message = error_of(tmp_path, raw)
    assert "exp.yaml" in message
    assert "train.epoch: unknown key" in message
    assert "epochs" in message and "batch_size" in message


def test_wrong_type_and_range_name_value(tmp_path):
    raw = {**TINY, "train": {**TINY["train"], "batch_size": "big", "epochs": 0}}
    message = error_of(tmp_path, raw)
    assert "train.batch_size = 'big'" in message
    assert "train.epochs = 0" in message and "greater than or equal to 1" in message


def test_bad_choice_lists_allowed_values(tmp_path):
    message = error_of(tmp_path, {**TINY, "policy": "fp8"})
    assert "policy = 'fp8'" in message
    for allowed in ("float32", "mixed_float16", "mixed_bfloat16", "auto"):
        assert allowed in message
    assert "Input should be" not in message  # mptrain's wording, as for unknown keys
    near = error_of(tmp_path, {**TINY, "policy": "mixed_bfloat"})
    assert "not one of float32, mixed_float16" in near and "(did you mean mixed_bfloat16?)" in near
    # a kind names the schema of its section: its key and the kinds, as for any fixed list
    kind = error_of(tmp_path, {**TINY, "model": {"kind": "mpl"}})
    assert "model.kind = 'mpl': not one of mlp, cnn, application" in kind
    assert "(did you mean mlp?)" in kind and "Input tag" not in kind


def test_model_kind_switch_validates_the_right_schema(tmp_path):
    message = error_of(tmp_path, {**TINY, "model": {"kind": "cnn", "hidden_units": [3]}})
    assert "model.hidden_units: unknown key" in message and "filters" in message


def test_cross_field_rules(tmp_path):
    assert "data.path: required key is missing" in error_of(tmp_path, {**TINY, "data": {"dataset": "npz"}})
    raw = {**TINY, "train": {**TINY["train"], "loss": "binary_crossentropy"},
           "model": {**TINY["model"], "output_activation": "softmax"}}
    assert "softmax makes the classes compete" in error_of(tmp_path, raw)
    regression = {**TINY, "train": {**TINY["train"], "loss": "mse", "metrics": ["accuracy"]}}
    assert "train.metrics accuracy: a regression (mse) has none" in error_of(tmp_path, regression)
    scaled = {**TINY, "train": {**TINY["train"], "target_scaling": "standard"}}
    assert "train.target_scaling scales a regression's targets" in error_of(tmp_path, scaled)


@pytest.mark.parametrize(("overrides", "message"), [
    (["train.keep_best={monitor: val_auc}", "train.metrics=[accuracy]"],
     "train.keep_best.monitor val_auc: not an epoch figure; allowed: loss, accuracy, each with val_ first"),
    (["train.metrics=[accuracy, recall]"], "train.metrics recall (of class 1) needs train.loss "
                                           "binary_crossentropy"),
    (["train.reduce_lr_on_plateau={}", "train.optimizer={name: adam, schedule: {kind: cosine, "
      "learning_rate: 0.01}}"], "train.reduce_lr_on_plateau sets the learning rate, and "
                                "train.optimizer.schedule sets it too"),
    (["train.early_stopping={restore_best_weights: true}", "train.keep_best={monitor: loss}"],
     "give both one monitor (now val_loss and loss)"),
    (["train.class_weight={0: -1}"], "train.class_weight.0 = -1: Input should be greater than 0"),
    # the run's judge reads the test set: a val_ figure would judge it by nothing, in silence
    (["train.monitor=val_accuracy"], "train.monitor val_accuracy: a run is judged on the test set"),
    # a loss is read by the objectives' own table, before TensorFlow (`validate` too)
    (["train.loss=not_a_loss"], "train.loss 'not_a_loss': not a loss Keras knows"),
    (["train.loss=poisson"], "train.loss poisson: mptrain has no objective to judge it"),
    (["train.loss={name: binary_focal_crossentropy, kwargs: {from_logits: true}}"],
     "kwargs from_logits is mptrain's to set"),
    (["train.loss={out: mse, other: not_a_loss}"], "train.loss.other 'not_a_loss': not a loss Keras knows"),
])
def test_keras_callbacks_metrics_and_weights_are_checked_before_anything_runs(tmp_path, overrides,
                                                                              message):
    assert message in " ".join(error_of(tmp_path, TINY, overrides).split())


@pytest.mark.parametrize(("overrides", "validation", "message"), [
    (["train.keep_best={monitor: val_auc}"], True,
     "train.keep_best.monitor val_auc: not an epoch figure of this classification"),
    (["train.reduce_lr_on_plateau={monitor: val_accuracy}"], False,
     "train.reduce_lr_on_plateau watches a validation figure and the data has no validation split"),
    (["train.reduce_lr_on_plateau={monitor: accuracy}"], False, None),
    (["train.keep_best={monitor: val_accuracy}"], True, None),
])
def test_epoch_rules_watch_what_the_data_and_objective_report(tiny_config, overrides, validation,
                                                                message):
    """Once the data is known: the objective's own metrics (train.metrics left out), and a
    validation figure only with a validation split."""
    from types import SimpleNamespace

    from mptrain.data.dataset import InputSpec
    from mptrain.errors import ConfigError
    from mptrain.model.checks import fit_to_data
    from mptrain.objective import for_head

    config = tiny_config(*overrides)
    data = SimpleNamespace(spec=InputSpec((16,), "vector"), train=SimpleNamespace(size=512),
                           val=SimpleNamespace(size=128) if validation else None, source="synthetic")
    objective = for_head(config.train.loss, 4)
    if message is None:
        fit_to_data(config, data, objective)
        return
    with pytest.raises(ConfigError, match=message):
        fit_to_data(config, data, objective)


def test_restore_best_weights_keeps_the_best_on_its_own_monitor(tmp_path):
    config = load_config(write(tmp_path, TINY), ["train.early_stopping={monitor: val_accuracy, "
                                                 "min_delta: 0.01, restore_best_weights: true}"])
    kept = config.train.best_kept
    assert (kept.monitor, kept.min_delta, kept.mode()) == ("val_accuracy", 0.01, "max")
    assert load_config(write(tmp_path, TINY), ["train.early_stopping={}"]).train.best_kept is None


def test_yaml_syntax_error_gives_line(tmp_path):
    message = error_of(tmp_path, "name: x\ntrain: [unclosed\n")
    assert "not valid YAML at line" in message


def test_top_level_must_be_mapping(tmp_path):
    assert "must be a mapping" in error_of(tmp_path, "- a\n- b\n")


def test_missing_file_mentions_builtins():
    with pytest.raises(ConfigError, match="no such file.*mnist_mixed"):
        load_config("does/not/exist.yaml")


def test_overrides_are_yaml_scalars_and_create_paths():
    assert parse_override("train.epochs=2") == (["train", "epochs"], 2)
    assert parse_override("train.jit_compile=true") == (["train", "jit_compile"], True)
    assert parse_override("model.hidden_units=[8, 8]") == (["model", "hidden_units"], [8, 8])
    raw = apply_overrides({"train": {"epochs": 5}}, ["train.epochs=1", "output.dir=/x"])
    assert raw == {"train": {"epochs": 1}, "output": {"dir": "/x"}}


@pytest.mark.parametrize("bad", ["epochs", "=3", "a..b=1", "train.epochs=[1,"])
def test_bad_override_syntax(bad):
    with pytest.raises(ConfigError, match="--set"):
        apply_overrides({}, [bad])


def test_a_bad_override_value_is_one_line_saying_where():
    with pytest.raises(ConfigError) as caught:
        apply_overrides({}, ["model.hidden_units=[32,oops"])
    message = str(caught.value)
    assert "\n" not in message and "at column 9" in message and "expected ',' or ']'" in message


def test_override_through_a_scalar_is_an_error():
    with pytest.raises(ConfigError, match="not a mapping"):
        apply_overrides({"policy": "float32"}, ["policy.x=1"])


def test_override_is_validated_like_the_file(tmp_path):
    message = error_of(tmp_path, TINY, ["train.loop=eager"])
    assert "train.loop = 'eager'" in message and "not one of fit, custom" in message
    # a list given as `--set KEY=64,64` (YAML reads a string) is shown written as a list
    message = error_of(tmp_path, TINY, ["model.hidden_units=64,64"])
    assert "model.hidden_units = '64,64': a list is written in brackets: [64, 64]" in message
    assert "a list is written in brackets: [64]" in error_of(tmp_path, TINY, ["model.hidden_units=64"])


def test_repository_configs_folder_is_the_shipped_one():
    """`mptrain run configs/mnist_mixed.yaml` from a checkout reads the same files as `mnist_mixed`."""
    root = Path(__file__).resolve().parents[2]
    for name in builtin_configs():
        via_link = load_config(root / "configs" / f"{name}.yaml")
        assert via_link.to_yaml_dict() == load_config(name).to_yaml_dict()
        assert via_link.output.dir == Path.cwd() / "runs"  # never inside the package


def test_exponent_floats_are_floats_in_files_and_options(tmp_path):
    """YAML 1.1 (PyYAML) reads `1e-3` as a string; experiments follow YAML 1.2."""
    raw = {**TINY, "train": {**TINY["train"], "optimizer": {"name": "adam", "kwargs": {}}}}
    path = write(tmp_path, yaml.safe_dump(raw) + "seed: 1\n")
    text = path.read_text().replace("kwargs: {}", "kwargs: {learning_rate: 1e-3, epsilon: 1E-7}")
    config = load_config(write(tmp_path, text))
    assert config.train.optimizer.kwargs == {"learning_rate": 0.001, "epsilon": 1e-07}
    assert parse_override("train.optimizer.kwargs.learning_rate=3e-4")[1] == 0.0003
    assert parse_override("x=2.5e+2")[1] == 250.0 and parse_override("x=1_000")[1] == 1000
    assert parse_override("x=e5")[1] == "e5"  # not a number


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"learning_rate": "fast"}, "learning_rate = 'fast': expected a number"),
    ({"learnin_rate": 0.1}, "learnin_rate: Adam has no such argument (did you mean learning_rate?)"),
    ({"momentum": 0.9}, "momentum: Adam has no such argument"),
    ({"amsgrad": 1}, "amsgrad = 1: expected true or false"),
    ({"learning_rate": -1}, "learning_rate = -1: must not be negative"),
    ({"loss_scale_factor": 128}, "loss_scale_factor: not allowed here"),
])
def test_optimizer_arguments_are_checked_at_validate_time(tmp_path, kwargs, message):
    raw = {**TINY, "train": {**TINY["train"], "optimizer": {"name": "adam", "kwargs": kwargs}}}
    assert message in error_of(tmp_path, raw)


def test_optimizer_table_matches_the_installed_keras():
    import inspect

    import keras

    from mptrain.config.optimizers import COMMON, OPTIMIZERS, RESERVED

    for name, (cls, learning_rate, own) in OPTIMIZERS.items():
        signature = inspect.signature(getattr(keras.optimizers, cls).__init__)
        params = set(signature.parameters) - {"self", "kwargs"}
        assert params == set(own) | set(COMMON) | set(RESERVED), name
        assert signature.parameters["learning_rate"].default == learning_rate, name


def test_set_null_removes_a_key_and_kind_switch_drops_old_keys(tmp_path):
    path = write(tmp_path, TINY)
    assert load_config(path, ["train.max_steps=3", "train.max_steps=null"]).train.max_steps is None
    assert load_config(path, ["model.hidden_units=null"]).model.hidden_units == [4096, 4096]
    cnn = load_config(path, ["model.kind=cnn", "data.input_shape=[8, 8, 1]"])
    assert cnn.model.kind == "cnn" and cnn.model.num_classes == 4  # shared keys stay
    assert "hidden_units" not in cnn.model.model_dump()


@pytest.mark.parametrize(("text", "message"), [
    ("", "the file is empty"),
    ("# only a comment\n", "the file is empty"),
    ("name: x\ntrain:\n\tepochs: 2\n", "tabs"),
    ("!!python/object/apply:os.system ['echo pwned']\n", "not valid YAML"),
    ("a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n"
     "c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n"
     "e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n",
     "anchors/aliases"),
])
def test_hostile_files_give_clean_errors(tmp_path, text, message):
    assert message in error_of(tmp_path, text)


def test_non_utf8_file_and_folder_give_clean_errors(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("name: caf\xe9\n".encode("latin-1"))
    with pytest.raises(ConfigError, match="not UTF-8 text .* line 1"):
        load_config(bad)
    with pytest.raises(ConfigError, match="is a folder"):
        load_config(tmp_path)


def test_name_defaults_to_the_file_name(tmp_path):
    raw = {k: v for k, v in TINY.items() if k != "name"}
    assert load_config(write(tmp_path, raw, name="my-exp.yaml")).name == "my-exp"


def test_random_and_mutated_files_are_experiments_or_clean_errors(tmp_path):
    """Whatever bytes an experiment file holds, loading it gives a validated experiment or
    mptrain's ConfigError: never another exception (which the CLI would show as a traceback)."""
    import hypothesis
    from hypothesis import given, settings
    from hypothesis import strategies as st

    base = yaml.safe_dump(TINY)
    lines = base.splitlines()
    scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**12, 10**12),
                        st.floats(allow_nan=True), st.text(max_size=20))
    values = st.recursive(scalars, lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=10), inner, max_size=4)),
        max_leaves=12)

    def mutated(data):
        choice = data.draw(st.integers(0, 3))
        if choice == 0:  # a line replaced by random text
            i = data.draw(st.integers(0, len(lines) - 1))
            return "\n".join(lines[:i] + [data.draw(st.text(max_size=40))] + lines[i + 1:])
        if choice == 1:  # a value replaced by a random YAML value
            raw = yaml.safe_load(base)
            section = data.draw(st.sampled_from(["data", "model", "train"]))
            key = data.draw(st.sampled_from(sorted(raw[section])))
            raw[section][key] = data.draw(values)
            return yaml.safe_dump(raw)
        if choice == 2:  # random bytes
            return data.draw(st.binary(max_size=200)).decode("latin-1")
        return base[: data.draw(st.integers(0, len(base)))]  # truncated

    path = tmp_path / "fuzz.yaml"

    @settings(max_examples=300, deadline=None, database=None)
    @given(st.data())
    def check(data):
        path.write_bytes(mutated(data).encode("utf-8", errors="surrogateescape"))
        with contextlib.suppress(ConfigError):
            load_config(path)

    assert hypothesis
    check()


def test_a_model_that_cannot_take_the_inputs_is_said_before_the_memory_estimate(tmp_path):
    """The memory estimate assumes inputs the model takes (a transformer's patches need an
    image): the model's check comes first, so a vector data set is one clear error, not an
    IndexError from the estimate."""
    from mptrain.config import validate
    from mptrain.errors import ConfigError
    from mptrain.runs.preflight import check_experiment
    from tests.helpers import tiny_raw

    config = validate(tiny_raw(f"output.dir={tmp_path}", "model.kind=transformer",
                               "model.hidden_units=null", "data.input_shape=[64]"), "exp.yaml")
    with pytest.raises(ConfigError, match="transformer needs images .* or token ids"):
        check_experiment(config)


def test_determinism_with_xla_is_refused_naming_both_keys(tmp_path):
    """Keras would run such a step without XLA and say nothing."""
    message = error_of(tmp_path, {**TINY, "deterministic": True,
                                  "train": {**TINY.get("train", {}), "jit_compile": True}})
    assert "train.jit_compile: true with deterministic: true" in message
