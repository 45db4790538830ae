"""`python`: the user's own Keras model, from a function mptrain calls.

`builder: "package.module:function"` or `"path/to/file.py:function"` is called *after* the
global dtype policy is set, so the layers it creates follow the policy. It is called with the
arguments it declares (of `GIVEN` and the keys of `model.kwargs`, by name), as pytest calls a
test with the fixtures its signature names, so keras.io's `make_model(input_shape,
num_classes)`, a script's `build_model(num_classes)` and a plain `build_model()` all work as
written. A parameter mptrain cannot give is refused by `validate`, without running the file.
A builder file imports the modules beside it, as `python file.py` would.

The builder must return an uncompiled `keras.Model`: mptrain compiles it with the
experiment's optimizer (a LossScaleOptimizer under mixed_float16), loss and metrics.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import sys
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from mptrain.config.kinds import PythonConfig
from mptrain.config.schema import ExperimentConfig
from mptrain.errors import ConfigError
from mptrain.model.in_process import MODULE
from mptrain.model.kinds import ModelKind
from mptrain.model.own_step import has_graph, own_methods

# what mptrain offers every builder, beside model.kwargs: the data's shape of one example
# (for several named inputs, name → shape),
# what its head must output (`Objective.builder_classes`: the classes, the labels or the
# targets), and the training split's inputs (a tf.data.Dataset of batches, as stored), for a
# builder that adapts its Normalization or TextVectorization to them alone
GIVEN = ("input_shape", "num_classes", "train_inputs")
# why a builder handed over as an object (`in_process`) cannot go where a command takes it
ELSEWHERE = ("a builder passed as a Python object exists only in the process that passed it, and "
             "{} in processes of their own; save it in a .py file and give "
             "model.builder: path/to/file.py:function")


def split_builder(builder: str) -> tuple[str, str]:
    target, _, function = builder.rpartition(":")
    return target, function


@dataclass(frozen=True)
class Parameters:
    """What a builder function declares: its named parameters in order, those without a
    default, those that can only be passed by position, and whether it takes **kwargs."""

    names: tuple[str, ...]
    required: frozenset[str]
    positional_only: tuple[str, ...] = ()
    any_keyword: bool = False

    def describe(self, function: str) -> str:
        return f"{function}({', '.join(self.names + (('**kwargs',) if self.any_keyword else ()))})"


def check_builder(cfg: PythonConfig) -> None:
    """The file or module exists and defines the function, and the function can be called
    with what the experiment gives it: checked without running the file (its own imports,
    such as TensorFlow, would make `validate` slow)."""
    builder = cfg.builder
    target, function = split_builder(builder)
    if target == MODULE:  # a Python object handed over in this process (a notebook's)
        found = getattr(sys.modules[target], function, None)
        if not callable(found):
            raise ConfigError(f"model.builder {builder!r}: "
                              + ELSEWHERE.format("compare and plan run each variant"))
        declared = declared_parameters(found)
    else:
        source = _source(target)
        if source is None or not source.is_file():
            what = "no such file" if target.endswith(".py") else "no such module on the Python path"
            raise ConfigError(f"model.builder {builder!r}: {target}: {what}")
        declared = _declared_in(source, function, builder)
    if declared is not None:
        arguments(cfg, declared, dict.fromkeys([*GIVEN, *cfg.kwargs]))


def _source(target: str) -> Path | None:
    """The .py file that defines a builder's `target` (None: a module not installed)."""
    if target.endswith(".py"):
        return Path(target)
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        return None
    return Path(spec.origin) if spec and spec.origin and spec.origin.endswith(".py") else None


def _declared_in(source: Path, function: str, builder: str, depth: int = 0) -> Parameters | None:
    """What `function` declares, read from the source that defines it: `source` itself, or
    the module beside it that `source` imports it from (`from my_keras_train import
    build_model`); None when it is bound some other way (an assignment, an installed module's
    import), to be checked when it is called."""
    try:
        tree = ast.parse(source.read_text(encoding="utf-8"), filename=str(source))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise ConfigError(f"model.builder {builder!r}: {source} is not valid Python ({exc})") from None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == function:
            return _parsed(node.args)
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and depth < 3:
            for alias in node.names:
                if (alias.asname or alias.name) == function:
                    beside = source.parent / f"{node.module.replace('.', '/')}.py"
                    return (_declared_in(beside, alias.name, builder, depth + 1)
                            if beside.is_file() else None)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == function
                                                for t in node.targets):
            return None
    defined = [node.name for node in tree.body
               if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    raise ConfigError(f"model.builder {builder!r}: {source} defines no function {function!r} "
                      f"(functions there: {', '.join(defined) or 'none'})")


def _parsed(args: ast.arguments) -> Parameters:
    """A function's parameters as its source declares them."""
    positional = [a.arg for a in (*args.posonlyargs, *args.args)]
    with_default = set(positional[len(positional) - len(args.defaults):]) if args.defaults else set()
    required = {name for name in positional if name not in with_default}
    required |= {a.arg for a, default in zip(args.kwonlyargs, args.kw_defaults, strict=True)
                 if default is None}
    return Parameters(tuple(positional + [a.arg for a in args.kwonlyargs]), frozenset(required),
                      tuple(a.arg for a in args.posonlyargs), args.kwarg is not None)


def declared_parameters(function) -> Parameters:
    """A callable's parameters, read by `inspect` (a builder handed over as an object)."""
    kinds = inspect.Parameter
    params = list(inspect.signature(function).parameters.values())
    named = [p for p in params if p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)]
    return Parameters(tuple(p.name for p in named),
                      frozenset(p.name for p in named if p.default is kinds.empty),
                      tuple(p.name for p in named if p.kind is kinds.POSITIONAL_ONLY),
                      any(p.kind is kinds.VAR_KEYWORD for p in params))


def arguments(cfg: PythonConfig, declared: Parameters,
              offered: dict[str, object]) -> tuple[list[object], dict[str, object]]:
    """The positional and keyword arguments to call the builder with: of `offered`
    (input_shape, num_classes and model.kwargs), what it declares (all of it, when it takes
    **kwargs). A parameter without a default that is not offered, or a model.kwargs key it
    does not take, is an error naming both."""
    function = split_builder(cfg.builder)[1]
    signature = declared.describe(function)
    unknown = [key for key in cfg.kwargs if key not in declared.names and not declared.any_keyword]
    if unknown:
        raise ConfigError(f"model.kwargs {', '.join(unknown)}: model.builder {cfg.builder!r} is "
                          f"{signature}, which takes no argument named {unknown[0]!r}")
    missing = [name for name in declared.names if name in declared.required and name not in offered]
    if missing:
        raise ConfigError(
            f"model.builder {cfg.builder!r} is {signature}: mptrain cannot give {missing[0]!r} "
            f"(it gives {', '.join(GIVEN)} and the keys of model.kwargs, by name); add "
            f"{missing[0]} to model.kwargs, or give it a default")
    taken = {name: value for name, value in offered.items()
             if name in declared.names or declared.any_keyword}
    positional = [taken.pop(name) for name in declared.positional_only if name in taken]
    return positional, taken


def check_builder_travels(config: ExperimentConfig, command: str) -> None:
    """compare and plan run each variant in a process of its own, and `run --workers` each
    worker, which cannot see a builder passed as a Python object: refuse before anything
    runs, not in every child."""
    builder = getattr(config.model, "builder", None)
    if builder and split_builder(builder)[0] == MODULE:
        raise ConfigError("model.builder: " + ELSEWHERE.format(f"{command} runs its training"))


@contextmanager
def beside(cfg: PythonConfig):
    """While a builder file is imported and called: its folder first on the module path, as
    `python file.py` has it, so it imports the modules beside it; taken off again after, so
    one experiment's folder does not decide what another's imports find."""
    target, _ = split_builder(cfg.builder)
    folder = str(Path(target).resolve().parent) if target.endswith(".py") else None
    if folder is None or folder in sys.path:
        yield
        return
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(folder)


def load_builder(cfg: PythonConfig):
    """The builder function, its file imported as `python file.py` would run it (within
    `beside`)."""
    target, function = split_builder(cfg.builder)
    check_builder(cfg)
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
        raise ConfigError(f"model.builder {cfg.builder!r}: importing {target} failed "
                          f"({type(exc).__name__}: {exc}; --verbose shows where)") from exc
    return getattr(module, function)


def _adapt_hint(exc: Exception) -> str:
    """What to do about a failure Keras 3 itself has: `Normalization.adapt` on a dataset under
    a 16-bit policy adds its float32 running mean to a 16-bit batch mean (the AddV2 error)."""
    import keras

    if "AddV2" not in str(exc) or keras.config.dtype_policy().compute_dtype == "float32":
        return ""
    return ("; under a 16-bit policy Keras' Normalization.adapt fails on a dataset: create the "
            "layer in float32, layers.Normalization(dtype='float32'), as the guide keeps such "
            "layers (raw features in 16 bits lose their digits before the mean is subtracted)")


class Python(ModelKind, kind="python"):
    runs_code = True

    def check(self, cfg: PythonConfig) -> None:
        check_builder(cfg)

    def build(self, config, spec, objective, train_inputs=None):
        """`objective`: what the model is for (its `num_classes`; None when only its builder's
        own compile can say); `train_inputs()`: the training split's inputs, made only for a
        builder that declares `train_inputs` (None: there is no data here to give, an error for
        such a builder). A model it returns compiled keeps that compile (`objective.Compiled`)."""
        import keras

        cfg: PythonConfig = config.model
        with beside(cfg):
            build = load_builder(cfg)
            declared = declared_parameters(build)
            offered = {"input_shape": ({n.name: n.shape for n in spec.named} if spec.kind == "named"
                                       else spec.shape),
                       "num_classes": objective.builder_classes() if objective is not None
                       else config.model.num_classes}
            if "train_inputs" in declared.names:
                if train_inputs is None:
                    raise ConfigError(f"model.builder {cfg.builder!r} takes train_inputs, and this "
                                      "command builds the model without the training data")
                offered["train_inputs"] = train_inputs()
            positional, keywords = arguments(cfg, declared, {**offered, **cfg.kwargs})
            try:
                model = build(*positional, **keywords)
            except Exception as exc:
                raise ConfigError(f"model.builder {cfg.builder!r} raised {type(exc).__name__}: {exc} "
                                  f"(--verbose shows where){_adapt_hint(exc)}") from exc
        if not isinstance(model, keras.Model):
            raise ConfigError(f"model.builder {cfg.builder!r} returned {type(model).__name__}, not a "
                              "keras.Model")
        if own_methods(model) and not has_graph(model):
            # its own algorithm, over sub-models of its own (a distiller's teacher and student,
            # a GAN's generator and discriminator): kept as it is, never wrapped in a graph,
            # which would train with Keras' default step (`own_step.py`)
            return model, [f"model from {cfg.builder}"]
        if not has_graph(model) or isinstance(model, keras.Sequential):
            # a subclassed model (or a Sequential, which keeps no graph of its own): called on a
            # symbolic input, it becomes one layer of a functional model mptrain can read
            inputs = ({n.name: keras.Input(shape=n.shape, name=n.name, dtype=n.dtype) for n in spec.named}
                      if spec.kind == "named" else
                      keras.Input(shape=spec.shape, dtype="int32" if spec.kind == "tokens" else "float32"))
            model = keras.Model(inputs, model(inputs), name=model.name)
        return model, [f"model from {cfg.builder}"]

