"""`python`: the user's own Keras model, from a function mptrain calls.

`builder: "package.module:function"` or `"path/to/file.py:function"` is called as
`function(input_shape=..., num_classes=..., **kwargs)` *after* the global dtype policy is set,
so the layers it creates follow the policy; mptrain then makes the output float32 if it is not.
The builder must return an uncompiled `keras.Model`: mptrain compiles it with the experiment's
optimizer (a LossScaleOptimizer under mixed_float16), loss and metrics.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

from mptrain.config.schema import ExperimentConfig, PythonConfig
from mptrain.data.dataset import InputSpec
from mptrain.errors import ConfigError
from mptrain.model.in_process import is_registered


def split_builder(builder: str) -> tuple[str, str]:
    target, _, function = builder.rpartition(":")
    return target, function


def builder_source(builder: str) -> Path | None:
    """The .py file that defines the builder (None when a module is not installed)."""
    target, _ = split_builder(builder)
    if target.endswith(".py"):
        return Path(target)
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def check_builder(builder: str) -> None:
    """The file or module exists and defines the function: checked without running it (the
    module's own imports, such as TensorFlow, would make `validate` slow)."""
    target, function = split_builder(builder)
    if is_registered(target):  # a Python object handed over in this process (a notebook's)
        if not callable(getattr(sys.modules[target], function, None)):
            raise ConfigError(f"model.builder {builder!r}: a builder passed as a Python object "
                              "exists only in the process that passed it (compare and plan run "
                              "each variant in a process of its own); save it in a .py file and "
                              "give model.builder: path/to/file.py:function")
        return
    source = builder_source(builder)
    if source is None or not source.is_file():
        what = "no such file" if target.endswith(".py") else "no such module on the Python path"
        raise ConfigError(f"model.builder {builder!r}: {target}: {what}")
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"model.builder {builder!r}: {source} is not valid Python ({exc})") from None
    defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    if function not in defined:
        listed = ", ".join(defined) or "none"
        raise ConfigError(f"model.builder {builder!r}: {source} defines no function {function!r} "
                          f"(functions there: {listed})")


def check_builder_travels(config: ExperimentConfig, command: str) -> None:
    """compare and plan run each variant in a process of its own, which cannot see a builder
    passed as a Python object: refuse before anything runs, not in every child."""
    builder = getattr(config.model, "builder", None)
    if config.model.kind == "python" and builder and is_registered(split_builder(builder)[0]):
        raise ConfigError(f"model.builder: a builder passed as a Python object exists only in "
                          f"the process that passed it, and {command} runs each variant in a "
                          "process of its own; save it in a .py file and give model.builder: "
                          "path/to/file.py:function")


def load_builder(builder: str):
    target, function = split_builder(builder)
    check_builder(builder)
    try:
        if target.endswith(".py"):
            name = f"mptrain_builder_{Path(target).stem}"
            spec = importlib.util.spec_from_file_location(name, target)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except Exception as exc:
        raise ConfigError(f"model.builder {builder!r}: importing {target} failed "
                          f"({type(exc).__name__}: {exc}; --verbose shows where)") from exc
    return getattr(module, function)


def build_python(config: ExperimentConfig, spec: InputSpec):
    import keras

    cfg: PythonConfig = config.model
    build = load_builder(cfg.builder)
    try:
        model = build(input_shape=spec.shape, num_classes=cfg.num_classes, **cfg.kwargs)
    except Exception as exc:
        raise ConfigError(f"model.builder {cfg.builder!r} raised {type(exc).__name__}: {exc} "
                          "(--verbose shows where)") from exc
    if not isinstance(model, keras.Model):
        raise ConfigError(f"model.builder {cfg.builder!r} returned {type(model).__name__}, not a "
                          "keras.Model")
    if model.compiled:
        raise ConfigError(f"model.builder {cfg.builder!r} returned a compiled model; return it "
                          "uncompiled: mptrain compiles it with the experiment's optimizer, loss "
                          "and loss scaling")
    try:
        functional = bool(model.outputs)
    except (AttributeError, ValueError):
        functional = False
    if not functional or isinstance(model, keras.Sequential):
        # a subclassed model (or a Sequential, which keeps no graph of its own): called on a
        # symbolic input, it becomes one layer of a functional model mptrain can read
        inputs = keras.Input(shape=spec.shape, dtype="int32" if spec.kind == "tokens" else "float32")
        model = keras.Model(inputs, model(inputs), name=model.name)
    return model, [f"model from {cfg.builder}"]
