"""PyTorch's side of bench/conv_bf16.py: ResNet50 (torchvision) on 64x64x3 images, batch 32,
Adam, trained in float32 or under bfloat16 autocast (channels_last too), on the CPU.

Run by conv_bf16.py in its own Python (a venv with torch and torchvision; they stay out of
mptrain's install: PyPI's torch pulls about 3 GB of CUDA packages). It reads one command a
line on stdin, `VARIANT STEPS`, runs that many steps and prints their times (ms) as JSON.
"""

import json
import sys
import time

import torch
import torchvision

torch.manual_seed(0)
BATCH, SIZE, CLASSES = 32, 64, 10


def make(variant: str):
    model = torchvision.models.resnet50(num_classes=CLASSES)
    if "channels_last" in variant:
        model = model.to(memory_format=torch.channels_last)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(BATCH, 3, SIZE, SIZE)
    if "channels_last" in variant:
        x = x.to(memory_format=torch.channels_last)
    y = torch.randint(0, CLASSES, (BATCH,))
    bf16 = variant.startswith("bf16")

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()

    return step


steps = {name: make(name) for name in ("float32", "bf16 autocast", "bf16 autocast channels_last")}
for step in steps.values():
    for _ in range(3):
        step()
print(json.dumps({"ready": torch.__version__, "threads": torch.get_num_threads()}), flush=True)
for line in sys.stdin:
    name, count = line.rsplit(" ", 1)
    times = []
    for _ in range(int(count)):
        started = time.perf_counter()
        steps[name]()
        times.append(1e3 * (time.perf_counter() - started))
    print(json.dumps(times), flush=True)
