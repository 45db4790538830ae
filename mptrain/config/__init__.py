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
)
from mptrain.config.schema import (
    MODEL_KINDS,
    POLICIES,
    CNNConfig,
    DataConfig,
    ExperimentConfig,
    MLPConfig,
    OptimizerConfig,
    SyntheticData,
)

__all__ = [
    "MODEL_KINDS", "POLICIES", "CNNConfig", "DataConfig", "ExperimentConfig", "MLPConfig",
    "OptimizerConfig", "SyntheticData", "apply_overrides", "builtin_configs", "find_config",
    "load_config", "parse_override", "parse_yaml", "read_yaml", "validate",
]
