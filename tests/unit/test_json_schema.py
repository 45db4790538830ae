"""The exported experiment schema, checked as an editor checks a file: with a real JSON Schema
validator, on every built-in experiment and on good and bad files, against `validate`."""

import copy
import json

import jsonschema
import pytest

from mptrain.config import builtin_configs, load_config
from mptrain.config.json_schema import experiment_schema
from mptrain.config.loading import find_config, parse_yaml
from mptrain.errors import ConfigError
from tests.helpers import TINY


def schema_errors(document: dict) -> list[str]:
    validator = jsonschema.Draft202012Validator(experiment_schema())
    return [error.message for error in validator.iter_errors(document)]


def test_the_schema_is_a_valid_draft_2020_12_schema():
    jsonschema.Draft202012Validator.check_schema(experiment_schema())


@pytest.mark.parametrize("name", sorted(builtin_configs()))
def test_every_built_in_experiment_satisfies_the_schema(name):
    """Read as mptrain reads it (YAML 1.2 numbers) and as a YAML 1.1 reader does (PyYAML):
    each reader's document passes a real validator."""
    import yaml

    text = find_config(name).read_text()
    assert schema_errors(parse_yaml(text)) == [], name
    assert schema_errors(yaml.safe_load(text)) == [], name


def with_(path: str, value):
    raw = copy.deepcopy({k: v for k, v in TINY.items() if k != "name"})
    node = raw
    *parents, last = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[last] = value
    return raw


GOOD = [
    {},  # every key has a default, name included (the file's name)
    {k: v for k, v in TINY.items() if k != "name"},
    with_("model", {"kind": "cnn", "filters": [8], "dense_units": [16], "num_classes": 4}),
    with_("policy", "mixed_bfloat16"),
    with_("train.loop", "custom"),
    with_("data", {"dataset": "npz", "path": "d.npz"}),
]
BAD = [
    with_("policy", "mixed_bfloat"),  # not a policy
    with_("train.batch_size", "big"),  # wrong type
    with_("train.batch_size", 0),  # below its minimum
    with_("train.epochs_", 3),  # unknown key
    with_("model", {"kind": "cnn", "hidden_units": [3]}),  # a key the kind does not have
    with_("data", {"dataset": "npz"}),  # a required key missing
    with_("train.loop", "eager"),
    {"name": "spaces are not allowed"},
]


@pytest.mark.parametrize("document", GOOD + BAD)
def test_the_schema_and_validate_agree(tmp_path, document):
    """A file the schema rejects is one mptrain rejects too, and the other way round (read
    as a file is read: `name` from the file's name)."""
    import yaml

    by_schema = schema_errors(document)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(document))
    try:
        load_config(path)
        by_validate = None
    except ConfigError as exc:
        by_validate = str(exc)
    assert (by_schema == []) == (by_validate is None), (json.dumps(document), by_schema, by_validate)
    assert (document in GOOD) == (by_validate is None)


def test_the_schema_carries_each_keys_description_and_default():
    train = experiment_schema()["$defs"]["TrainConfig"]["properties"]
    assert train["batch_size"]["default"] == 128 and train["batch_size"]["minimum"] == 1
    assert "math" in train["math_mode"]["description"].lower()


def test_every_key_is_described():
    """An editor shows a key's description as the user types it, and the reference
    (docs/reference/experiment.md) prints it: a key without one is a key nobody explained."""
    schema = experiment_schema()
    sections = {"top level": schema, **schema["$defs"]}
    bare = [f"{name}.{key}" for name, section in sections.items()
            for key, prop in section.get("properties", {}).items() if not prop.get("description")]
    assert bare == []
