"""Experiment files in, validated `ExperimentConfig` out: YAML reading, `--set`, error messages.

Every way an experiment can be wrong ends here as one `ConfigError` whose lines each name
where the problem is (the file, or the `--set` option that caused it), the key path, the bad
value and what is allowed, so the user fixes it without reading a traceback.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from mptrain.config.optimizers import Schedule
from mptrain.config.schema import DataConfig, ExperimentConfig, ModelConfig
from mptrain.errors import ConfigError, did_you_mean

# A resolved experiment has ~50 values; anything far larger is a mistake or an attack
# (YAML aliases can make a few lines expand to billions of nodes: "billion laughs").
MAX_NODES = 20_000
MAX_FILE_BYTES = 1_000_000


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader (no Python object tags, nothing executed), reading floats the
    YAML 1.2 way: PyYAML follows YAML 1.1, where `1e-3` (no dot) is the *string* "1e-3",
    so `learning_rate: 1e-3` would reach the optimizer as text."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*\.?[0-9_]*|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def parse_yaml(text: str) -> Any:
    """YAML text → Python data, with YAML 1.2 floats and bounded alias expansion."""
    data = yaml.load(text, Loader=_Loader)  # noqa: S506  (_Loader is a SafeLoader)
    if _expanded_size(data, {}) > MAX_NODES:
        raise ConfigError(
            f"expands to more than {MAX_NODES:,} values through YAML anchors/aliases; "
            "an experiment needs a few dozen: write the values out")
    return data


def _expanded_size(node: Any, memo: dict[int, int]) -> int:
    """How many values `node` holds once aliases are expanded, without expanding them."""
    if not isinstance(node, dict | list):
        return 1
    key = id(node)
    if key not in memo:
        memo[key] = MAX_NODES + 1  # a self-referencing alias counts as too big
        children = node.values() if isinstance(node, dict) else node
        total = 1
        for child in children:
            total += _expanded_size(child, memo)
            if total > MAX_NODES:
                break
        memo[key] = total
    return memo[key]


def builtin_configs() -> dict[str, str]:
    """Name → one-line description of the experiments shipped inside the package."""
    entries = sorted(resources.files("mptrain.configs").iterdir(), key=lambda e: e.name)
    return {entry.name.removesuffix(".yaml"): entry.read_text().partition("\n")[0].lstrip("# ").strip()
            for entry in entries if entry.name.endswith(".yaml")}


def find_config(ref: str | Path) -> Path:
    """A path to an existing file, or the name of a built-in experiment (`mnist_mixed`)."""
    path = Path(ref)
    if path.is_dir():
        raise ConfigError(f"{ref}: is a folder; give an experiment .yaml file")
    if path.is_file():
        return path
    name = path.name.removesuffix(".yaml")
    builtins = builtin_configs()
    if path.parent == Path(".") and name in builtins:
        return Path(str(resources.files("mptrain.configs") / f"{name}.yaml"))
    raise ConfigError(f"{ref}: no such file, and not a built-in experiment"
                      f"{did_you_mean(name, builtins)} (built-ins: {', '.join(builtins)})")


def yaml_problem(exc: yaml.YAMLError, text: str, lines: bool) -> str:
    """PyYAML's error in one line: where (line and column, or column alone for a one-line
    `--set` value) and what, without its multi-line excerpt of the text."""
    mark = getattr(exc, "problem_mark", None)
    where = ""
    if mark is not None:
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if lines else \
            f" at column {mark.column + 1}"
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    if "\t" in text and "\\t" in problem:
        problem += " (YAML indents with spaces, not tabs)"
    return f"{where}: {problem}"


def read_yaml(path: Path) -> dict[str, Any]:
    """The file's top-level mapping. Unreadable, non-UTF-8, empty, oversized or non-mapping
    files are errors that say which."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {len(data):,} bytes; an experiment file is a few hundred")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}: not UTF-8 text (byte {data[exc.start]:#04x} on line {line}); "
                          "save the file as UTF-8") from None
    try:
        raw = parse_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML{yaml_problem(exc, text, lines=True)}") from None
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if raw is None:
        raise ConfigError(f"{path}: the file is empty; write the keys that differ from the defaults "
                          "(`mptrain validate synthetic` prints a whole experiment to start from)")
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, not {type(raw).__name__}")
    return raw


# --- --set overrides ----------------------------------------------------------------------


def _members(union: Any, tag: str) -> dict[str, type[BaseModel]]:
    """Each value of a tagged union's `tag` → the member class that has it."""
    return {name: member for member in get_args(get_args(union)[0])
            for name in get_args(member.model_fields[tag].annotation)}


MODEL_KINDS = _members(ModelConfig, "kind")
DATA_KINDS = _members(DataConfig, "dataset")
# Keys that pick a kind, the classes of the kinds, and the default kind: changing a kind
# with --set drops the keys only the old kind had.
_KIND_KEYS = {("model", "kind"): (MODEL_KINDS, "mlp"), ("data", "dataset"): (DATA_KINDS, "synthetic")}
# Pydantic names the chosen member of a tagged union in error locations (model.cnn.filters).
_UNION_TAGS = {**MODEL_KINDS, **DATA_KINDS, **_members(Schedule, "kind")}


KEY_PATH = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*"


def parse_override(text: str) -> tuple[list[str], Any]:
    """`train.epochs=2` → (["train", "epochs"], 2). The value is read as YAML."""
    key, sep, raw = text.partition("=")
    if not sep or not re.fullmatch(KEY_PATH, key):
        raise ConfigError(f"--set {text!r}: expected key.path=value, e.g. --set train.epochs=2")
    try:
        value = parse_yaml(raw) if raw.strip() else None
    except yaml.YAMLError as exc:
        raise ConfigError(f"--set {text!r}: the value is not valid YAML"
                          f"{yaml_problem(exc, raw, lines=False)}") from None
    return key.split("."), value


Changes = Mapping[str, Any] | list[str]  # {"train.epochs": 2}, or --set's ["train.epochs=2"]


def parsed_changes(changes: Changes | None) -> list[tuple[list[str], Any, str]]:
    """(key path, value, how the user wrote it) for each change: `--set` strings are read as
    YAML (`--set train.epochs=2`); a mapping's values, from Python, are taken as they are
    (`override {'train.epochs': 2}`), so an error names what the user wrote, where."""
    if not changes:
        return []
    if isinstance(changes, Mapping):
        for key in changes:
            if not isinstance(key, str) or not re.fullmatch(KEY_PATH, key):
                raise ConfigError(f"override {key!r}: expected a key path such as 'train.epochs'")
        return [(key.split("."), value, f"override {{{key!r}: {value!r}}}")
                for key, value in changes.items()]
    return [(*parse_override(text), f"--set {text}") for text in changes]


def apply_overrides(raw: dict[str, Any], changes: Changes | None) -> dict[str, Any]:
    """A copy of `raw` with each change set (intermediate mappings created).

    `key=null` (None) removes the key, so its default applies. Setting a kind (`model.kind=cnn`)
    drops the keys the new kind does not have, so switching kinds needs one option.
    """
    result = copy.deepcopy(raw)
    for keys, value, text in parsed_changes(changes):
        node = result
        for depth, key in enumerate(keys[:-1]):
            child = node.setdefault(key, {})
            if not isinstance(child, dict):
                raise ConfigError(f"{text}: {'.'.join(keys[: depth + 1])} is {child!r}, not a mapping")
            node = child
        if value is None:
            node.pop(keys[-1], None)
            continue
        kinds, default = _KIND_KEYS.get(tuple(keys), ({}, None))
        if isinstance(value, str) and value in kinds and node.get(keys[-1], default) != value:
            for stale in [k for k in node if k not in kinds[value].model_fields]:
                del node[stale]
        node[keys[-1]] = copy.deepcopy(value)
    return result


# --- validation ---------------------------------------------------------------------------


def validate(raw: dict[str, Any], source: str, overrides: Changes | None = None) -> ExperimentConfig:
    """The validated experiment, or a `ConfigError` with one line per problem."""
    try:
        return ExperimentConfig.model_validate(raw)
    except ValidationError as exc:
        set_keys = {tuple(keys): text for keys, _, text in parsed_changes(overrides)}
        lines = [_describe(err, set_keys) for err in exc.errors()]
        if all(line.lstrip().startswith("--set ") for line in lines):
            head = f"invalid --set option for the experiment {source}"
        elif all(line.lstrip().startswith("override ") for line in lines):
            head = f"invalid override for the experiment {source}"
        else:
            head = f"{source}: invalid experiment"
        raise ConfigError(head + "\n" + "\n".join(lines)) from None


def load_config(ref: str | Path | ExperimentConfig, overrides: Changes | None = None) -> ExperimentConfig:
    """Read, override and validate an experiment; the one way configs enter the program.
    `name` defaults to the file's name; relative paths are resolved (`resolve_paths`). An
    experiment given already loaded (from Python) gets the overrides as a `variant`."""
    if isinstance(ref, ExperimentConfig):
        return variant(ref, overrides) if overrides else ref
    path = find_config(ref)
    raw = apply_overrides(read_yaml(path), overrides)
    raw.setdefault("name", path.name.removesuffix(".yaml").replace(" ", "_"))
    from_cli = {tuple(keys) for keys, _, _ in parsed_changes(overrides)}
    config = resolve_paths(validate(raw, str(ref), overrides), path.resolve().parent, from_cli,
                           output_base=Path.cwd() if is_builtin(path) else None)
    config._source = str(ref)
    return config


def variant(config: ExperimentConfig, changes: Changes) -> ExperimentConfig:
    """The one way to derive an experiment: a new validated one, `config` with `changes`
    ({"train.epochs": 2}, or `--set` strings) applied; `config` is unchanged. compare's
    variants, plan's trials and candidates, memory's runs and a sweep's points are all made
    here. Paths given in the changes are relative to the current folder, as on the command
    line; the others were resolved already."""
    raw = apply_overrides(config.to_yaml_dict(), changes)
    changed = resolve_paths(validate(raw, config.source, changes), Path.cwd())
    changed._source = config.source
    return changed


def _path_keys(section: str, kinds: dict[str, type[BaseModel]]) -> list[tuple[str, str]]:
    """The keys of `section` that some kind types as a Path, read from the schema: a kind's
    new path key is resolved like every other without being listed anywhere."""
    return sorted({(section, key) for kind in kinds.values() for key, field in kind.model_fields.items()
                   if Path in (field.annotation, *get_args(field.annotation))})


# Every key that holds a path (section, key); `model.weights` and `model.builder` are strings
# that may be one (a python builder's before its ":").
PATH_KEYS = (*_path_keys("data", DATA_KINDS), *_path_keys("model", MODEL_KINDS),
             ("model", "weights"), ("model", "builder"), ("output", "dir"))
NOT_PATHS = {"weights": ("imagenet",), "cache": ("none", "memory")}  # names these keys take


def resolve_paths(config: ExperimentConfig, base: Path,
                  from_cli: set[tuple[str, ...]] = frozenset(),
                  output_base: Path | None = None) -> ExperimentConfig:
    """Relative paths made absolute, by one rule (as docker-compose does): a path written in
    the experiment file, or a default such as `output.dir: runs`, is relative to the file's
    folder, so an experiment and its data travel together; a path given with `--set` is
    relative to the current folder, where the user typed it. A built-in experiment's own files
    (python_builder's my_model.py) are in the package beside it, but its runs go to
    `output_base`, the current folder: nothing is written into the installed package. A `~`
    is the user's home; absolute paths are kept as written, not resolved (a link stays a
    link: `--resume` compares them)."""

    def absolute(where: tuple[str, str], path: str) -> str:
        given_here = any(keys == where[: len(keys)] for keys in from_cli)  # with --set
        root = Path.cwd() if given_here else (output_base or base) if where == ("output", "dir") else base
        path = os.path.expanduser(path)
        return path if os.path.isabs(path) else str((root / path).resolve())

    resolved = ExperimentConfig.model_validate(_each_path(config.to_yaml_dict(), absolute))
    resolved._source = config.source
    return resolved


def as_file_in(config: ExperimentConfig, folder: Path) -> dict[str, Any]:
    """The experiment as a file in `folder` writes it (`mptrain plan`'s plan.yaml): its paths
    relative to that folder where they share more than the file system's root with it, so the
    file can be committed and moved with the data and builder it names; `resolve_paths`
    reads them back. Paths elsewhere (a system's data set) stay absolute."""
    folder = folder.resolve()

    def relative(where: tuple[str, str], path: str) -> str:
        if not os.path.isabs(path) or os.path.commonpath([path, folder]) == os.path.sep:
            return path  # relative already, or elsewhere
        return os.path.relpath(path, folder)

    return _each_path(config.to_yaml_dict(), relative)


def _each_path(raw: dict[str, Any], convert) -> dict[str, Any]:
    """`raw` (an experiment's keys as its file holds them) with `convert((section, key), path)`
    on each path it holds: not on the names these keys also take (imagenet, memory), and of
    a builder, on its file (a module's name, `package.models:build`, is no path)."""
    for section, key in PATH_KEYS:
        value = raw.get(section, {}).get(key)
        if value is None or value in NOT_PATHS.get(key, ()):
            continue
        if key != "builder":
            raw[section][key] = convert((section, key), value)
            continue
        file, _, function = value.rpartition(":")
        if file.endswith(".py"):
            raw[section][key] = f"{convert((section, key), file)}:{function}"
    return raw


def is_builtin(path: Path) -> bool:
    """A file of the experiments shipped inside the package (also through the repository's
    `configs` link): its runs go to the current folder, never into the package."""
    shipped = Path(str(resources.files("mptrain.configs"))).resolve()
    return path.resolve().parent == shipped


def _describe(err: dict[str, Any], set_keys: dict[tuple[str, ...], str]) -> str:
    """One line per pydantic error: origin, key path, bad value, what is allowed."""
    loc = tuple(str(part) for part in err["loc"] if part not in _UNION_TAGS)
    key = ".".join(loc) or "(top level)"
    origin = next((f"{text}: " for keys, text in set_keys.items()
                   if loc and (loc[: len(keys)] == keys or keys[: len(loc)] == loc)), "")
    kind = err["type"]
    if kind == "extra_forbidden":
        allowed = _allowed_keys(err["loc"][:-1])
        listed = f"; allowed keys here: {', '.join(allowed)}" if allowed else ""
        return f"  {origin}{key}: unknown key{did_you_mean(loc[-1], allowed)}{listed}"
    if kind == "missing":
        return f"  {origin}{key}: required key is missing"
    value = err.get("input")
    if kind == "value_error":
        where = f"{key}: " if loc else ""
        return f"  {origin}{where}{err['msg'].removeprefix('Value error, ')}"
    shown = repr(value) if not isinstance(value, dict) else "{…}"
    if kind == "union_tag_invalid":  # a kind (model.kind, data.dataset) that names no member
        ctx = err["ctx"]
        key, value, shown = key + "." + ctx["discriminator"].strip("'"), ctx["tag"], repr(ctx["tag"])
        err = {**err, "type": "literal_error", "ctx": {"expected": ctx["expected_tags"]}}
    if err["type"] == "literal_error":  # a name from a fixed list: say the list, and the nearest
        choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        hint = did_you_mean(str(value), choices) if isinstance(value, str) else ""
        return f"  {origin}{key} = {shown}: not one of {', '.join(choices)}{hint}"
    if kind == "list_type" and isinstance(value, str | int | float):  # `--set KEY=64,64`: a string
        return f"  {origin}{key} = {shown}: a list is written in brackets: [{str(value).replace(',', ', ')}]"
    return f"  {origin}{key} = {shown}: {err['msg']}"


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    """Walk the schema along an error location to list the keys a mapping accepts."""
    model: Any = ExperimentConfig
    for part in loc:
        if part in _UNION_TAGS:  # the union member pydantic chose
            model = _UNION_TAGS[part]
            continue
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return []
        annotation = field.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            model = annotation
        # else a tagged union: the next part of the location names the member
    return list(getattr(model, "model_fields", {}))
