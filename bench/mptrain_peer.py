"""mptrain's side of every_lever.py: one experiment, prepared as `mptrain run` prepares it, in a
process of its own (what TensorFlow reads as it starts, the math library above all, is the
experiment's), stepped a turn at a time on request.

    python mptrain_peer.py EXPERIMENT [KEY=VALUE ...]

It prints one JSON line when ready (the candidate it runs, its math library, XLA, its batch), then reads
one command a line on stdin, `STEPS`, trains that many steps on one batch of the experiment's
data (its step as compiled for `Model.fit`: `train_on_batch`) and prints their times (ms) as
JSON.
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    from mptrain.config import load_config
    from mptrain.hardware.machine import library_of
    from mptrain.precision.candidates import candidate_name
    from mptrain.runs.experiment import prepare

    config = load_config(sys.argv[1], sys.argv[2:])
    prepared = prepare(config)
    x, y = next(iter(prepared.batches.train))
    model = prepared.model
    for _ in range(3):
        model.train_on_batch(x, y)
    print(json.dumps({"candidate": candidate_name(prepared.config, prepared.choice.name),
                      "library": library_of(prepared.machine.onednn),
                      "xla": prepared.choice.jit_compile, "batch": prepared.config.train.batch_size}),
          flush=True)
    for line in sys.stdin:
        times = []
        for _ in range(int(line)):
            started = time.perf_counter()
            model.train_on_batch(x, y)
            times.append(1e3 * (time.perf_counter() - started))
        print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
