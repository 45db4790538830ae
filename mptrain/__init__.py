"""mptrain: train Keras models in mixed precision from YAML experiment files."""

__version__ = "0.1.0"
