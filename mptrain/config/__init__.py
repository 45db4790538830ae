"""The experiment file: its schema (`schema.py`), how files and `--set` options become one
validated `ExperimentConfig` (`loading.py`), and the optimizers' accepted arguments."""

from mptrain.config.loading import (
    apply_overrides,
    builtin_configs,
    find_config,
    load_config,
    parse_override,
    parse_yaml,
    read_yaml,
    validate,
    variant,
)
from mptrain.config.schema import DATA_KINDS, MODEL_KINDS, POLICIES, ExperimentConfig

__all__ = [
    "DATA_KINDS", "MODEL_KINDS", "POLICIES", "ExperimentConfig", "apply_overrides",
    "builtin_configs", "find_config", "load_config", "parse_override", "parse_yaml", "read_yaml",
    "validate", "variant",
]
