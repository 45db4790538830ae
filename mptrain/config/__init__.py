"""The experiment file: its schema (`schema.py`), how files and `--set` options become one
validated `ExperimentConfig` (`loading.py`), and the optimizers' accepted arguments."""

from mptrain.config.loading import (
    apply_overrides,
    builtin_configs,
    load_config,
    parse_override,
    validate,
    variant,
)
from mptrain.config.schema import ExperimentConfig

__all__ = ["ExperimentConfig", "apply_overrides", "builtin_configs", "load_config", "parse_override",
           "validate", "variant"]
