"""Benchmark: every lever of this CPU, found by `mptrain plan` in minutes, against TensorFlow's
default and PyTorch (issue 58).

For each model (ResNet50 64x64x3, batch 32, Adam, float32, synthetic data; the guide's MLP
784-4096-4096-10, batch 1024, RMSprop, on Fashion-MNIST; `cnn_fashion_mnist`):
1. `mptrain plan` as a user runs it (a child process): how long it took, its pick and claimed
   speed-up, and what its race dropped; with `--full`, also `mptrain plan --no-race` (every
   trial to its end): the same pick?
2. In ROUNDS rounds, in a random order every round, a turn of TURN steps each, every side a
   process of its own holding its model: TensorFlow's default (the experiment in float32 as
   TensorFlow runs it here), mptrain's pick (its plan file), float32 with the other math
   library, and PyTorch float32, channels_last (ResNet50) and `torch.compile` where it
   compiles. Per round, TensorFlow's default step over each side's (a drift moves all of
   them): the median and range over the rounds beside each side's own median step and range;
   and the pick against PyTorch float32 the same way.

The PyTorch side needs a Python with torch and torchvision (`MPTRAIN_TORCH_PYTHON`, as
conv_bf16.py says); without it those rows are left out, with a note.

Goals on an AVX2-only CPU: the pick >= 2.5x TensorFlow's default for ResNet50, >= 2x for the
MLP, >= 1.3x for the CNN, and faster than PyTorch float32; plans <= 3 min (MLP) and <= 5 min
(ResNet50, one batch size); the claim within 10% of the verified ratio. Where TensorFlow turns
oneDNN on (AMX, AVX512_BF16): nothing slower, plans as fast.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import cpu_model, table  # noqa: E402

HERE = Path(__file__).resolve().parent
ROUNDS, TURN = 5, 5
RESNET50 = {"name": "resnet50", "seed": 0, "policy": "float32",
            "data": {"dataset": "synthetic", "input_shape": [64, 64, 3], "train_size": 640,
                     "test_size": 64, "num_classes": 10},
            "model": {"kind": "application", "name": "ResNet50"},
            "train": {"batch_size": 32, "epochs": 1, "optimizer": {"name": "adam"}}}
MLP = ["policy=float32", "model.hidden_units=[4096, 4096]", "train.batch_size=1024",
       "train.optimizer={name: rmsprop}"]
# name → (experiment: a built-in or a mapping, its --set changes, the PyTorch model and variants)
MODELS = {
    "ResNet50 64x64x3, batch 32": (RESNET50, [], "resnet50", "float32,channels_last,compile"),
    "guide MLP 784-4096-4096, batch 1024": ("fashion_mnist_mixed", MLP, "mlp", "float32,compile"),
    "cnn_fashion_mnist": ("cnn_fashion_mnist", ["policy=float32"], None, None),
}


def experiment_file(name: str, spec, sets: list[str], folder: Path) -> Path:
    """The experiment as a file of its own (its plan file goes beside it)."""
    from mptrain.config import load_config, validate

    config = load_config(spec if isinstance(spec, str) else validate(spec, "<bench>"), sets)
    path = folder / f"{name.split()[0].lower().strip(',')}.yaml"
    raw = config.to_yaml_dict()
    raw["output"]["dir"] = str(folder / "runs")
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def plan(path: Path, race: bool) -> tuple[dict, float]:
    """`mptrain plan` as a user runs it: its record, and its seconds."""
    out = path.with_suffix(".plan.yaml" if race else ".full.plan.yaml")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mptrain", "plan", str(path), "--json", "--out",
                           str(out), *([] if race else ["--no-race"])], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"plan of {path} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout), seconds


class Peer:
    """A side in its own process, a turn on request: mptrain's (`mptrain_peer.py`) or
    PyTorch's (`torch_peer.py`)."""

    def __init__(self, command: list[str], env: dict | None = None):
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True, env=env)
        line = self.process.stdout.readline()
        if not line:
            raise OSError(f"{' '.join(command[:3])} ended before it was ready")
        self.ready = json.loads(line)

    def turn(self, command: str) -> list[float]:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def sides(path: Path, plan_file: Path, torch_model: str | None, torch_variants: str | None):
    """label → a turn of TURN steps (ms), and what was left out and why."""
    mptrain = [sys.executable, str(HERE / "mptrain_peer.py")]
    peers, notes = {}, []
    peers["TensorFlow's default"] = Peer([*mptrain, str(path)])
    here = peers["TensorFlow's default"].ready["library"]
    other = "eigen" if here == "onednn" else "onednn"
    peers["pick"] = Peer([*mptrain, str(plan_file)])
    peers[f"float32+{other}"] = Peer([*mptrain, str(path), f"train.math_library={other}"])
    turns = {label: (lambda peer=peer: peer.turn(str(TURN))) for label, peer in peers.items()}
    batches = {label: peer.ready["batch"] for label, peer in peers.items()}
    python = os.environ.get("MPTRAIN_TORCH_PYTHON")
    if torch_model and python:
        torch = Peer([python, str(HERE / "torch_peer.py"), torch_model, torch_variants])
        peers["PyTorch"] = torch
        notes.append(f"PyTorch {torch.ready['ready']}, {torch.ready['threads']} threads"
                     + "".join(f"; {v} left out ({why})" for v, why in torch.ready["failed"].items()))
        torch_sides = [v for v in torch_variants.split(",") if v not in torch.ready["failed"]]
        turns |= {f"PyTorch {v}": (lambda v=v: torch.turn(f"{v} {TURN}")) for v in torch_sides}
        batches |= {f"PyTorch {v}": batches["TensorFlow's default"] for v in torch_sides}  # the same model
    elif torch_model:
        notes.append("PyTorch left out: set MPTRAIN_TORCH_PYTHON to a Python with torch and torchvision")
    pick = peers["pick"].ready
    notes.append(f"pick: {pick['candidate']} ({pick['library']}, XLA {'on' if pick['xla'] else 'off'}); "
                 f"TensorFlow's default here runs {here}")
    return turns, batches, peers, notes


def in_rounds(turns: dict) -> dict[str, list[float]]:
    """Each side's median step (ms) in each round, the sides in a random order every round."""
    rounds: dict[str, list[float]] = {name: [] for name in turns}
    order = random.Random(0)
    for _ in range(ROUNDS):
        names = list(turns)
        order.shuffle(names)
        for name in names:
            rounds[name].append(statistics.median(turns[name]()))
    return rounds


def ratios(base: list[float], side: list[float], per_example: float = 1.0) -> str:
    """base's step over the side's, per round (per example: the side's batch over the base's,
    a pick at twice the batch does twice the work a step): median (range)."""
    per_round = sorted(per_example * b / s for b, s in zip(base, side, strict=True))
    return f"{statistics.median(per_round):.2f}x ({per_round[0]:.2f}-{per_round[-1]:.2f})"


def one_model(name: str, folder: Path, full: bool) -> str:
    spec, sets, torch_model, torch_variants = MODELS[name]
    path = experiment_file(name, spec, sets, folder)
    record, seconds = plan(path, race=True)
    dropped = [t["label"] for t in record["trials"]
               if t["summary"] and t["summary"]["stopped_by"] == "dropped"]
    winner = next(t for t in record["trials"] if t["label"] == record["winner"])
    lines = [f"### {name}", "",
             f"- plan: {seconds / 60:.1f} min, pick {record['winner']} ({record['reason']}); "
             f"{len(record['trials'])} trials, dropped by the race: {', '.join(dropped) or 'none'}"]
    if full:
        full_record, full_seconds = plan(path, race=False)
        lines.append(f"- plan --no-race: {full_seconds / 60:.1f} min, pick {full_record['winner']} "
                     f"({full_record['reason']}): "
                     f"{'the same pick' if full_record['winner'] == record['winner'] else 'ANOTHER PICK'}")
    turns, batches, peers, notes = sides(path, path.with_suffix(".plan.yaml"), torch_model, torch_variants)
    try:
        rounds = in_rounds(turns)
    finally:
        for peer in set(peers.values()):
            peer.close()
    base, base_batch = rounds["TensorFlow's default"], batches["TensorFlow's default"]
    rows = [[label, f"{statistics.median(v):.0f} ({min(v):.0f}-{max(v):.0f})",
             str(batches[label]), ratios(base, v, batches[label] / base_batch)]
            for label, v in rounds.items()]
    claim = winner["verdict"]["speed"]["ratio"]
    lines += [f"- {'; '.join(notes)}", f"- the plan claimed {claim:.2f}x float32 for its pick"
              if claim else "- the plan's pick is float32", ""]
    lines.append(table(rows, ["side", "ms a step: median (range)", "batch",
                              "TF default / side, per example, per round"]))
    if "PyTorch float32" in rounds:
        against = ratios(rounds["PyTorch float32"], rounds["pick"], batches["pick"] / base_batch)
        lines.append(f"\npick against PyTorch float32, per round: {against}")
    return "\n".join(lines)


def main() -> str:
    full = "--full" in sys.argv
    names = [a for a in sys.argv[1:] if not a.startswith("--")] or list(MODELS)
    text = [f"every lever, on {cpu_model()}; {ROUNDS} rounds of {TURN} steps, in a random order"]
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            text.append(one_model(next(m for m in MODELS if m.startswith(name)), Path(scratch), full))
            print(text[-1], flush=True, file=sys.stderr)
    return "\n\n".join(text)


if __name__ == "__main__":
    print(main())
