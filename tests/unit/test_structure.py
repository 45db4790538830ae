"""The package's shape: imports only point down (no circles, counting imports inside
functions), and the names a user writes are defined once."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "mptrain"


def imports() -> dict[str, set[str]]:
    """module → the mptrain modules it imports, at any depth of its code."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mptrain"):
                found.add(node.module)
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("mptrain")}
        graph[name] = found
    resolved = {}
    for module, targets in graph.items():
        edges = set()
        for target in targets:
            while target and target not in graph:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges.add(target)
        resolved[module] = edges
    return resolved


def test_no_import_circles():
    graph = imports()
    state: dict[str, str] = {}
    circles = []

    def visit(module, path):
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                circles.append(path[path.index(target):] + [target] if target in path else [module, target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert circles == [], "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def test_the_lowest_floors_import_nothing_of_mptrain():
    graph = imports()
    assert graph["mptrain.errors"] == set()
    assert graph["mptrain.hardware.machine"] == set()
    assert graph["mptrain.training.records"] == set()


def test_training_loops_and_data_do_not_reach_up_to_the_commands():
    graph = imports()
    commands = {"mptrain.cli", "mptrain.runs.runner", "mptrain.measure.compare", "mptrain.measure.plan",
                "mptrain.runs.experiment", "mptrain.measure.memory"}
    for module, targets in graph.items():
        if module.startswith(("mptrain.training", "mptrain.data", "mptrain.model", "mptrain.config")):
            assert not targets & commands, (module, targets & commands)


def test_policy_loop_and_strategy_names_are_defined_once():
    """Only config/names.py spells out the names: any other literal holding all of one
    list, in any order or spelling (tuple, list, set; quotes either way), is a second copy."""
    from mptrain.config.names import LOOPS, POLICIES, STRATEGIES

    lists = {"loops": set(LOOPS), "strategies": set(STRATEGIES) - {"none"},
             "policies": set(POLICIES) - {"auto"}}
    copies = []
    for path in PACKAGE.rglob("*.py"):
        if path.relative_to(PACKAGE).as_posix() == "config/names.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Tuple | ast.List | ast.Set):
                words = {e.value for e in node.elts
                         if isinstance(e, ast.Constant) and isinstance(e.value, str)}
                copies += [(path.name, name) for name, names in lists.items() if names <= words]
    assert copies == []


def test_no_command_imports_another_command():
    """A command parses, calls the library and renders: what two commands share is library
    (or `commands.options`, their shared option types and output), never one another."""
    graph = imports()
    commands = {m for m in graph if m.startswith("mptrain.commands.") and m != "mptrain.commands.options"}
    assert len(commands) >= 10
    for command in commands:
        assert not graph[command] & commands, (command, graph[command] & commands)


def test_the_library_does_not_import_the_commands():
    graph = imports()
    for module, targets in graph.items():
        if not module.startswith(("mptrain.commands", "mptrain.cli", "mptrain.__main__")):
            assert not {t for t in targets if t.startswith(("mptrain.commands", "mptrain.cli"))}, module


def test_every_public_name_is_defined_in_one_module():
    """A name a reader searches for leads to one definition: a command's function is
    NAME_command, the library's call beside it says what it does (`run_compare`)."""
    where: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef | ast.ClassDef):
                names = [node.name]
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            else:
                names = [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(
                    node.target, ast.Name) else []
            for name in names:
                if not name.startswith("_"):
                    where.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert len(where) > 500 and not twice, twice


def test_every_option_of_every_command_is_the_users():
    """What mptrain tells its own child processes is a spec of their own (`runs.child`), never
    a hidden option: `--help` shows every option a command takes."""
    import typer.main

    from mptrain.cli import app

    group = typer.main.get_command(app)
    hidden = {f"{name} {param.opts[0]}" for name, command in group.commands.items()
              for param in command.params if getattr(param, "hidden", False)}
    assert len(group.commands) >= 10 and not hidden, hidden


def test_the_top_level_holds_few_modules():
    top = [p.name for p in PACKAGE.glob("*.py")]
    assert len(top) <= 10, sorted(top)


def _typer_command(node) -> bool:
    """A command's Typer signature (its options, each with its help) is declaration, not logic."""
    return any("typer." in ast.unparse(arg.annotation) for arg in node.args.args + node.args.kwonlyargs
               if arg.annotation is not None)


def test_modules_and_functions_stay_small():
    """No module over 450 lines; no function over 60 lines or with more than 6 parameters
    (a Typer command's signature aside): a wider one takes a typed object instead."""
    too_long, too_wide, too_big = [], [], []
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        name = path.relative_to(PACKAGE).as_posix()
        if len(text.splitlines()) > 450:
            too_big.append(name)
        for node in ast.walk(ast.parse(text)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) or _typer_command(node):
                continue
            a = node.args
            params = [p.arg for p in a.posonlyargs + a.args + a.kwonlyargs if p.arg not in ("self", "cls")]
            params += [x for x in (a.vararg, a.kwarg) if x is not None]
            if node.end_lineno - node.lineno + 1 > 60:
                too_long.append(f"{name}:{node.name}")
            if len(params) > 6:
                too_wide.append(f"{name}:{node.name}")
    assert (too_big, too_long, too_wide) == ([], [], [])


# `runs.experiment.prepare`'s set-up, in the order it must keep, and why each step comes
# after the one before (what reordering would break)
SET_UP = (
    ("start_environment", "the variables TensorFlow reads as it starts (oneDNN, the allocator)"),
    ("import_tensorflow", "after them: read once, at import"),
    ("probe", "the machine, which the plan and the policy are decided for"),
    ("follow_plan", "a plan's choice, checked against the machine probed"),
    ("choose_policy", "the policy, from the plan, the machine and its kernels"),
    ("apply_policy", "before the data: text_folder's TextVectorization follows the policy"),
    ("load_dataset", "the data, under the policy"),
    ("hold_on_host", "the data held before the memory meter starts: not training memory"),
    ("MemoryMeter", "training memory, from here on"),
    ("set_random_seed", "before the model: the same seed builds the same weights"),
    ("_model_for", "the model, its objective and its checks"),
    ("make_batches", "the batches, as the objective reads the labels"),
)


def test_prepare_sets_an_experiment_up_in_the_order_each_step_needs():
    source = (PACKAGE / "runs" / "experiment.py").read_text()
    prepare = next(node for node in ast.walk(ast.parse(source))
                   if isinstance(node, ast.FunctionDef) and node.name == "prepare")
    first: dict[str, int] = {}
    for node in ast.walk(prepare):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            first[name] = min(first.get(name, node.lineno), node.lineno)
    lines = [first.get(name) for name, _ in SET_UP]
    assert None not in lines, [name for (name, _), line in zip(SET_UP, lines, strict=True) if line is None]
    assert lines == sorted(lines), [name for name, _ in sorted(SET_UP, key=lambda s: first[s[0]])]
