"""The docs stay true to the code: the generated references are current, every relative link
and anchor resolves, and every `mptrain` command in a code block either runs here (the cheap,
offline ones) or is named below with why it does not."""

from __future__ import annotations

import difflib
import functools
import importlib.util
import os
import re
import shlex
from pathlib import Path

import pytest

from tests.helpers import mptrain

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
# Generated from the code and checked for staleness instead; their `$ mptrain ...` lines are
# Typer's usage synopses (`[OPTIONS]`), not commands to type.
GENERATED = ROOT / "docs" / "reference"

# Commands the docs show that this test runs, offline and without TensorFlow, from a folder
# holding FILES and a link to configs/. Each must exit 0.
RUN = {
    "mptrain configs",
    "mptrain plan --help",
    "mptrain schema > experiment.schema.json",
    "mptrain validate configs/mnist_mixed.yaml",
    "mptrain validate my_experiment.yaml",
    "mptrain validate synthetic --set model.kind=cnn --set data.input_shape=[28,28,1]",
}
FILES = {  # the experiment docs/experiment-file.md shows beside the schema
    "my_experiment.yaml": "# yaml-language-server: $schema=./experiment.schema.json\n"
                          "name: my_experiment\npolicy: mixed_bfloat16\n"
                          "train: {epochs: 3, batch_size: 256}\n",
}
# Commands the docs show that this test does not run, and why (what covers them instead).
NOT_RUN = {
    "mptrain run configs/mnist_mixed.yaml": "trains, and needs MNIST (a download): the guide's experiment",
    "mptrain compare --policies float32,mixed_float16":
        "trains mnist_mixed (needs MNIST); offline its error is tests/e2e/test_compare.py's",
    "mptrain check-gpu": "times kernels in TensorFlow: tests/e2e/test_cli.py",
    "mptrain check-gpu --bench": "times every dtype (~15 s): tests/unit/test_hardware.py",
    "mptrain plan configs/fashion_mnist_mixed.yaml": "trials (minutes): tests/e2e/test_plan.py",
    "mptrain plan exp.yaml": "trials, with the default 2x-batch cell: tests/e2e/test_plan.py (a built-in)",
    **{f"mptrain run exp.yaml --hosts 10.0.0.1:12345,10.0.0.2:12345 --host-index {i} --set "
       "train.loop=custom": "two hosts: tests/e2e/test_hosts.py runs them in network namespaces"
       for i in (0, 1)},
    "mptrain run --resume RUN_DIR --hosts 10.0.0.1:12345,10.0.0.2:12345 --host-index I":
        "every host resumed: tests/e2e/test_hosts.py (after a cut link)",
    "mptrain plan exp.yaml --batch-sizes 128,256":
        "trials at two batch sizes: tests/e2e/test_plan.py (across batch sizes)",
    "mptrain compare exp.yaml --policies float32,mixed_bfloat16 --batch-sizes 128,256":
        "trains four variants: tests/e2e/test_compare.py (across batch sizes)",
    "mptrain run synthetic": "trains: tests/e2e/test_cli.py, tests/e2e/test_training.py",
    "mptrain run gan.yaml": "trains docs/examples/gan.yaml: tests/e2e/test_own_algorithm.py (small data)",
    "mptrain compare gan.yaml --policies float32,mixed_bfloat16,mixed_float16":
        "trains three variants: tests/e2e/test_own_algorithm.py (small data)",
    "mptrain plan synthetic --budget 5": "trials: tests/e2e/test_plan.py",
    "mptrain run synthetic --epochs 1 --steps 20":
        "trains; the shortcuts are tests/e2e/test_cli.py's (--steps) and tests/unit/test_launch.py's",
    "mptrain run fashion_mnist_mixed": "trains on Fashion-MNIST: tests/e2e/test_bring_your_own.py",
    "mptrain run configs/fashion_mnist_mixed.yaml --set train.epochs=2 --set policy=mixed_bfloat16":
        "trains on Fashion-MNIST: tests/e2e/test_bring_your_own.py",
    "mptrain compare synthetic --policies float32,mixed_bfloat16,mixed_float16 --loops fit,custom":
        "trains six variants: tests/e2e/test_compare.py",
    "mptrain runs": "lists the run folders where it is typed: tests/unit/test_runs.py",
    "mptrain runs runs --compare RUN_A RUN_B": "needs two run folders: tests/unit/test_runs.py",
    "mptrain plan my_experiment.yaml": "trials: tests/e2e/test_plan.py",
    "mptrain run my_experiment.plan.yaml": "trains a plan's file: tests/e2e/test_plan.py",
    "mptrain lint vgg16_synthetic --target gpu":
        "builds the model in TensorFlow: tests/e2e/test_diagnostics.py",
    "mptrain diagnose text_transformer": "trains a few steps: tests/e2e/test_diagnostics.py",
    "mptrain memory vgg16_synthetic": "trains 3 steps per policy: tests/e2e/test_diagnostics.py",
    "mptrain run finetune.yaml": "downloads ImageNet weights, needs a folder of photos: "
                                 "tests/e2e/test_models.py trains the recipe offline",
    "mptrain run finetune.yaml --set model.kind=saved --set model.path=runs/finetune-…/model.keras "
    "--set model.unfreeze=true --set train.optimizer.kwargs.learning_rate=1e-5":
        "the recipe's second stage: tests/e2e/test_models.py",
    "mptrain compare finetune.yaml --policies float32,mixed_bfloat16": "the recipe's data and weights",
    "mptrain run exp.yaml --set distribute.strategy=multi_worker_mirrored --set train.loop=custom":
        "one worker of a two-host cluster: tests/e2e/test_distribute.py runs it on 127.0.0.1",
    "mptrain run exp.yaml --workers 2 --set train.loop=custom": "trains: tests/e2e/test_distribute.py",
    "mptrain run exp.yaml --workers 2 --max-restarts 2 --set train.loop=custom":
        "trains, kills workers: tests/e2e/test_lost_workers.py",
    "mptrain run --resume RUN_DIR": "trains a stopped run: tests/e2e/test_recovery.py",
    "mptrain run --resume RUN_DIR --set train.epochs=10": "trains: tests/e2e/test_recovery.py",
    "mptrain compare --resume COMPARE_DIR": "trains: tests/e2e/test_recovery.py",
    "mptrain plan --resume PLAN_DIR": "trials: tests/e2e/test_plan.py",
    "mptrain run exp.yaml --set output.mlflow={tracking_uri: http://127.0.0.1:5000}":
        "trains, needs an MLflow server: tests/e2e/test_tracking.py starts one",
}


@functools.cache
def generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_references_are_current():
    stale = []
    for path, text in generator().references().items():
        committed = path.read_text() if path.is_file() else ""
        if committed != text:
            diff = difflib.unified_diff(committed.splitlines(), text.splitlines(), "committed",
                                        "generated", n=0, lineterm="")
            stale.append(f"{path.relative_to(ROOT)}:\n" + "\n".join(list(diff)[:12]))
    assert not stale, "stale; run `make docs`:\n" + "\n".join(stale)


# --- links -------------------------------------------------------------------------------

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(([^()\s]+)\)")


def outside_fences(text: str) -> list[str]:
    """The page's lines outside fenced blocks (a `#` comment in a block is not a heading, nor
    are a block's brackets links)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            kept.append(line)
    return kept


def links(text: str) -> list[str]:
    """Each link's target, outside code (inline code spans dropped first)."""
    return LINK.findall("\n".join(re.sub(r"`[^`]*`", "", line) for line in outside_fences(text)))


def anchors(path: Path) -> set[str]:
    """The anchors of a page's headings, as GitHub makes them (a repeated one gets -1, -2...)."""
    anchor, seen, found = generator().anchor, {}, set()
    for line in outside_fences(path.read_text()):
        heading = re.match(r"^#{1,6}\s+(.+?)\s*#*\s*$", line)
        if heading:
            slug = anchor(heading.group(1))
            found.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
            seen[slug] = seen.get(slug, 0) + 1
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:: not ours to check offline
            continue
        file, _, fragment = target.partition("#")
        linked = (page.parent / file).resolve() if file else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked):
            broken.append(f"{target}: no heading #{fragment} in {os.path.relpath(linked, page.parent)}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page):
    assert broken_links(page) == []


def test_the_link_check_sees_links_and_finds_broken_ones(tmp_path):
    assert links("[a](x.md) `[not](y.md)` [`run`](#run) [b [c]](d.md#e)\n```\n[z](z.md)\n```") == \
        ["x.md", "#run", "d.md#e"]
    assert {"docs/outputs.md", "docs/reference/cli.md"} <= set(links((ROOT / "README.md").read_text()))
    page = tmp_path / "page.md"
    page.write_text("# A `b`: c\n\n## A `b`: c\n\n[ok](#a-b-c) [ok](#a-b-c-1) [no](#a-b) [no](gone.md)\n")
    assert broken_links(page) == ["#a-b: no heading #a-b in page.md", "gone.md: no such file"]


# --- commands in code blocks -------------------------------------------------------------

SHELL_BLOCKS = {"", "console", "shell", "sh", "bash"}


def commands_in(text: str) -> list[str]:
    """Each `mptrain ...` command line of the page's shell blocks (a line that starts with
    `mptrain`, `$ mptrain` or `NAME=value`): comments dropped, continued lines joined, leading
    `NAME=value` assignments left out. Other lines (a tree, `make test`) are not commands."""
    found, block, pending = [], None, ""
    for line in text.splitlines():
        if FENCE.match(line):
            block = line.strip().lstrip("`~").strip() if block is None else None
            continue
        line = line.strip().removeprefix("$ ")
        if block not in SHELL_BLOCKS or not (pending or re.match(r"^(mptrain\s|[A-Z_][A-Z0-9_]*=)", line)):
            continue
        pending += line
        if pending.endswith("\\"):
            pending = pending[:-1] + " "
            continue
        words, pending = shlex.split(pending, comments=True), ""
        while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
            words.pop(0)
        if words and words[0] == "mptrain":
            found.append(" ".join(words))
    return found


def documented_commands() -> dict[str, list[str]]:
    """Every command in the docs → the pages that show it."""
    where: dict[str, list[str]] = {}
    for page in PAGES:
        if GENERATED not in page.parents:
            for command in commands_in(page.read_text()):
                where.setdefault(command, []).append(str(page.relative_to(ROOT)))
    return where


def test_every_documented_command_is_run_here_or_said_why_not():
    documented = documented_commands()
    unclassified = {c: pages for c, pages in documented.items() if c not in RUN and c not in NOT_RUN}
    assert unclassified == {}, ("commands in the docs that tests/unit/test_docs.py neither runs "
                                "(RUN) nor names with a reason (NOT_RUN)")
    assert RUN & set(NOT_RUN) == set()
    gone = (RUN | set(NOT_RUN)) - set(documented)
    assert gone == set(), "listed in tests/unit/test_docs.py, but no longer in the docs"


def test_command_lines_are_read_as_a_shell_reads_them():
    text = "```\nmptrain run x.yaml   # a comment\nTF_CONFIG='{\"a\": 1}' \\\n  mptrain run y.yaml " \
           "--set 'k={a: b}'\n$ mptrain configs\nmake test\n```\n```yaml\nmptrain run z.yaml\n```\n"
    assert commands_in(text) == ["mptrain run x.yaml", "mptrain run y.yaml --set k={a: b}",
                                 "mptrain configs"]


@pytest.mark.parametrize("command", sorted(RUN))
def test_a_documented_command_runs(command, tmp_path):
    (tmp_path / "configs").symlink_to(ROOT / "configs", target_is_directory=True)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    words = shlex.split(command)[1:]
    into = None
    if ">" in words:
        words, into = words[:words.index(">")], words[words.index(">") + 1]
    done = mptrain(*words, cwd=tmp_path)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr}"
    if into is not None:
        (tmp_path / into).write_text(done.stdout)
        assert done.stdout.strip().startswith("{")


def test_the_readme_layout_names_every_module_where_it_is():
    """The README's layout lists each package's modules: a module added, moved or removed
    without it would send a newcomer to the wrong room."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Layout (in brief)", 1)[1].split("```", 2)[1]
    listed: dict[str, set[str]] = {}
    current = None
    for line in block.splitlines():
        if line.startswith("mptrain/"):
            current, line = line.split()[0], " ".join(line.split()[1:])
        if current is not None:
            listed.setdefault(current, set()).update(re.findall(r"\b\w+\.py\b", line))
    for folder in sorted((ROOT / "mptrain").iterdir()):
        if folder.is_dir() and (folder / "__init__.py").exists() and folder.name != "configs":
            modules = {p.name for p in folder.glob("*.py")} - {"__init__.py"}
            assert listed.get(f"mptrain/{folder.name}/", set()) - {"__init__.py"} == modules, folder.name
    top = {p.name for p in (ROOT / "mptrain").glob("*.py")} - {"__main__.py"}
    assert listed["mptrain/"] == top


def test_the_walk_through_run_has_at_most_ten_steps_each_naming_code_that_exists():
    """docs/development.md walks `mptrain run` from the command to the loop and back: at most
    ten steps, and every `path/module.py: name` it points a reader to is defined there."""
    import ast

    page = (ROOT / "docs" / "development.md").read_text()
    walk = page.split("## `mptrain run`, from the command to the loop and back", 1)[1].split("\n## ", 1)[0]
    steps = re.findall(r"^(\d+)\. \*\*", walk, re.MULTILINE)
    assert 1 <= len(steps) <= 10 and steps == [str(n) for n in range(1, len(steps) + 1)]
    pointers = re.findall(r"`([\w/]+\.py): ([\w.]+)`", walk)
    assert len(pointers) >= len(steps) - 2, pointers
    for path, name in pointers:
        tree = ast.parse((ROOT / "mptrain" / path).read_text())
        defined = {node.name for node in ast.walk(tree)
                   if isinstance(node, ast.FunctionDef | ast.ClassDef)}
        assert set(name.split(".")) <= defined, f"{path}: {name}"
