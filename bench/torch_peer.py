"""PyTorch's side of the benchmarks that set mptrain beside it (conv_bf16.py, every_lever.py):
a model trained on the CPU in several variants, a turn on request.

    python torch_peer.py [MODEL] [VARIANT,...]

MODEL: `resnet50` (torchvision's, 64x64x3 images, batch 32, Adam; the default) or `mlp` (the
guide's 784-4096-4096-10, batch 1024, RMSprop). VARIANT: `float32`, `channels_last`,
`compile` (float32 under `torch.compile`, where it compiles), `bf16 autocast`,
`bf16 autocast channels_last` (default: float32 and the bf16 ones). Run in its own Python (a
venv with torch and torchvision; they stay out of mptrain's install: PyPI's torch pulls
about 5 GB of CUDA packages). It prints one JSON line when ready (its version, threads, and
the variants that could not be built, with why), then reads one command a line on stdin,
`VARIANT STEPS`, runs that many steps and prints their times (ms) as JSON.
"""

import json
import sys
import time

import torch

torch.manual_seed(0)
MODELS = {"resnet50": (32, "adam"), "mlp": (1024, "rmsprop")}


def network(model: str):
    if model == "mlp":
        return torch.nn.Sequential(torch.nn.Linear(784, 4096), torch.nn.ReLU(),
                                   torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                   torch.nn.Linear(4096, 10))
    import torchvision

    return torchvision.models.resnet50(num_classes=10)


def make(model: str, variant: str):
    batch, optimizer_name = MODELS[model]
    net = network(model)
    channels_last = "channels_last" in variant
    if channels_last:
        net = net.to(memory_format=torch.channels_last)
    optimizer = (torch.optim.Adam if optimizer_name == "adam" else torch.optim.RMSprop)(
        net.parameters(), lr=1e-3)
    x = torch.rand(batch, 784) if model == "mlp" else torch.rand(batch, 3, 64, 64)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (batch,))
    bf16 = variant.startswith("bf16")
    forward = torch.compile(net) if variant == "compile" else net

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        optimizer.step()

    return step


def main() -> None:
    model = sys.argv[1] if len(sys.argv) > 1 else "resnet50"
    wanted = (sys.argv[2].split(",") if len(sys.argv) > 2 else
              ["float32", "bf16 autocast", "bf16 autocast channels_last"])
    steps, failed = {}, {}
    for name in wanted:
        try:
            step = make(model, name)
            for _ in range(3):  # warm-up (and torch.compile's compiling)
                step()
            steps[name] = step
        except Exception as exc:  # torch.compile without a working compiler, above all
            failed[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    print(json.dumps({"ready": torch.__version__, "threads": torch.get_num_threads(),
                      "failed": failed}), flush=True)
    for line in sys.stdin:
        name, count = line.rsplit(" ", 1)
        times = []
        for _ in range(int(count)):
            started = time.perf_counter()
            steps[name]()
            times.append(1e3 * (time.perf_counter() - started))
        print(json.dumps(times), flush=True)


if __name__ == "__main__":
    main()
