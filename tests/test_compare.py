"""`mptrain compare` for real (two tiny variants through the CLI) and its pure parts."""

import json
from pathlib import Path

import pytest

from mptrain.compare import Variant, build_record, parse_choices, verdict
from mptrain.config import POLICIES
from mptrain.errors import ConfigError
from tests.test_cli import mptrain, write_config


def test_compare_two_policies_through_the_cli(tmp_path):
    config = write_config(tmp_path, "train.epochs=2")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--json",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    folder = Path(record["folder"])
    assert folder.parent == tmp_path / "runs" and folder.name.startswith("compare-tiny-")
    f32, bf16 = record["variants"]
    assert (f32["policy"], bf16["policy"]) == ("float32", "mixed_bfloat16")
    assert bf16["compute_dtype"] == "bfloat16" and bf16["output_dtype"] == "float32"
    # same initial weights and data: the first losses agree up to bfloat16 rounding
    assert bf16["first_step_loss"] == pytest.approx(f32["first_step_loss"], rel=2e-2)
    # ratios are computed from the measured numbers
    assert f32["speedup"] == 1.0 and f32["verdict"] == "baseline"
    assert bf16["speedup"] == pytest.approx(
        f32["step_time_ms"]["median"] / bf16["step_time_ms"]["median"])
    assert bf16["accuracy_delta_pt"] == pytest.approx(
        100 * (bf16["test_accuracy"] - f32["test_accuracy"]))
    assert bf16["memory_ratio"] > 0
    # files: compare.json, the weights every variant loaded, each variant's run folder, the plot
    assert json.loads((folder / "compare.json").read_text())["variants"][1]["variant"] == \
        "mixed_bfloat16-fit"
    assert (folder / "initial_weights.npz").is_file()
    for v in (f32, bf16):
        assert Path(v["run_dir"]).parent == folder
        assert (Path(v["run_dir"]) / "summary.json").is_file()
    assert_nontrivial_png(folder / "compare.png")


def assert_nontrivial_png(path: Path):
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 900
    # not a blank canvas: many distinct colours (lines in several colours, text, boxes)
    flat = (pixels[..., :3] * 255).astype("uint8").reshape(-1, 3)
    assert len({tuple(p) for p in flat[::7]}) > 50
    assert pixels[..., :3].std() > 0.05


def test_bounded_variant_is_reported_as_bounded(tmp_path):
    config = write_config(tmp_path)
    done = mptrain("compare", str(config), "--policies", "float32,mixed_float16",
                   "--loops", "custom", "--steps", "3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "bounded" in done.stdout and "step limit 3" in done.stdout
    record = json.loads(next((tmp_path / "runs").glob("compare-*/compare.json")).read_text())
    for v in record["variants"]:
        assert v["steps_run"] == 3 and v["bounded"] and v["verdict"].endswith("(bounded)")
        assert v["loop"] == "custom"


@pytest.mark.parametrize(("policies", "message"), [
    ("", "comma-separated list"),
    ("float32,,bfloat16", "comma-separated list"),
    ("float32,fp8", "unknown 'fp8'; allowed: float32"),
    ("float32,float32", "float32 listed more than once"),
])
def test_bad_policies(policies, message):
    with pytest.raises(ConfigError, match=message):
        parse_choices(policies, POLICIES, "--policies")


def test_bad_policies_through_cli_run_nothing(tmp_path):
    config = write_config(tmp_path)
    done = mptrain("compare", str(config), "--policies", "float32,float32", cwd=tmp_path)
    assert done.returncode == 2 and "more than once" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_record_ratios_and_verdicts_from_numbers():
    def summary(median, accuracy, memory):
        return {"step_time_ms": {"median": median}, "test_accuracy": accuracy, "test_loss": 1.0,
                "peak_memory_bytes": memory, "device_peak_memory_bytes": None, "bounded": None}

    variants = [Variant("float32", "fit"), Variant("mixed_bfloat16", "fit")]
    record = build_record("x", Path("/tmp/x"), variants,
                          [summary(100.0, 0.90, 1000), summary(50.0, 0.897, 600)])
    bf16 = record["variants"][1]
    assert bf16["speedup"] == 2.0 and bf16["memory_ratio"] == 0.6
    assert bf16["verdict"] == "2.0x faster, accuracy within 0.3 pt"
    assert verdict(0.4, -2.0, False, None) == "2.5x slower, accuracy -2.0 pt"
    assert verdict(1.0, 0.0, False, "stopped") == "same speed, accuracy within 0.0 pt (bounded)"
    # without float32 the first policy listed is the baseline
    no_f32 = build_record("x", Path("/tmp/x"), variants[1:], [summary(50.0, 0.9, 1)])
    assert no_f32["baseline_policy"] == "mixed_bfloat16"


def test_compare_with_missing_data_leaves_nothing(tmp_path):
    config = write_config(tmp_path, "data.dataset=npz", f"data.path={tmp_path / 'none.npz'}")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()
