"""`mptrain compare` for real (tiny variants through the CLI) and its pure parts."""

import json
import re
from pathlib import Path

import pytest
import yaml

from mptrain.measure.compare import CompareRecord
from mptrain.measure.verdicts import speed
from mptrain.report.console import as_text
from mptrain.report.tables import compare_tables
from tests.e2e.test_plan import assert_in_turns
from tests.helpers import experiment, mptrain


@pytest.mark.kernel_path
def test_compare_two_policies_through_the_cli(tmp_path):
    # wide enough that TensorFlow's allocator counts its training memory (tiny ones stay below)
    config = experiment(tmp_path, "train.epochs=2", "data.input_shape=[256]",
                        "model.hidden_units=[512, 512]")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--json",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = CompareRecord.model_validate(json.loads(done.stdout))
    folder = Path(record.folder)
    assert folder.parent == tmp_path / "runs" and folder.name.startswith("compare-tiny-")
    f32, bf16 = record.variants
    assert (f32.candidate.name, bf16.candidate.name) == ("float32", "mixed_bfloat16")
    assert bf16.summary.compute_dtype == "bfloat16" and bf16.summary.output_dtype == "float32"
    # same initial weights and data: the first losses agree up to bfloat16 rounding
    assert bf16.summary.first_step_loss == pytest.approx(f32.summary.first_step_loss, rel=2e-2)
    # ratios are computed from the measured numbers
    assert f32.verdict.baseline and f32.verdict.words() == "baseline"
    # the speed-up is the median of the per-round ratios, from the rounds the record keeps
    assert len(f32.rounds) == len(bf16.rounds) >= 3 and record.turn_steps == 5
    assert record.input_ms_per_batch > 0  # the input pipeline alone, measured before the runs
    assert bf16.verdict.speed.paired and bf16.speedup == pytest.approx(speed(bf16, f32).ratio)
    assert bf16.summary.turn_wait_s > 0 and f32.summary.turn_wait_s > 0
    assert bf16.summary.wall_time_s > bf16.summary.time_to_first_step_s > 0
    assert_in_turns(done.stderr, ["float32-fit", "mixed_bfloat16-fit"])
    assert bf16.verdict.quality.delta == pytest.approx(
        100 * (bf16.summary.test_accuracy - f32.summary.test_accuracy))
    assert bf16.summary.quality.metric == "accuracy" == bf16.verdict.quality.label
    assert f32.summary.memory.training_peak_bytes and bf16.summary.memory.training_peak_bytes
    assert bf16.verdict.memory_ratio == pytest.approx(
        bf16.summary.memory.training_peak_bytes / f32.summary.memory.training_peak_bytes)
    # files: compare.json, the weights every variant loaded, each variant's run folder, the plot
    on_disk = CompareRecord.model_validate_json((folder / "compare.json").read_text())
    assert on_disk == record and record.plot == str(folder / "compare.png")
    assert (folder / "initial_weights.npz").is_file()
    for row in (f32, bf16):
        assert Path(row.summary.run_dir).parent == folder
        assert (Path(row.summary.run_dir) / "summary.json").is_file()
    assert_nontrivial_png(folder / "compare.png")
    # a resume is given nothing it would ignore: a change to the experiment, or another set of
    # policies, is refused by name, the folder untouched (the experiment as it was: accepted)
    before = (folder / "compare.json").read_bytes()
    for extra, said in [(["--set", "train.epochs=3"], "the options given change train.epochs"),
                        ([str(config), "--epochs", "4"], "the experiment given changes train.epochs"),
                        (["--policies", "float32"], "--policies float32: a compare resumes")]:
        refused = mptrain("compare", "--resume", str(folder), *extra, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    same = mptrain("compare", str(config), "--epochs", "2", "--resume", str(folder), cwd=tmp_path)
    assert same.returncode == 2 and "every variant has ended" in same.stderr, same.stderr
    assert (folder / "compare.json").read_bytes() == before


def assert_nontrivial_png(path: Path):
    import matplotlib.image

    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[0] > 600 and pixels.shape[1] > 1200
    # not a blank canvas: many distinct colours (lines in several colours, text, boxes)
    flat = (pixels[..., :3] * 255).astype("uint8").reshape(-1, 3)
    assert len({tuple(p) for p in flat[::7]}) > 50
    assert pixels[..., :3].std() > 0.05


def test_diverging_variant_is_shown_not_crashed_on_and_variants_pair_when_memory_is_short(tmp_path):
    """Pure float16 with Adam goes NaN (epsilon underflows): compare exists to show that.
    With 100 MB to plan with, three variants' processes do not fit together: each runs in
    turns with float32 alone, and its speed-up comes from its own pair's rounds."""
    config = experiment(tmp_path, "train.epochs=2",
                          "train.optimizer.kwargs={learning_rate: 0.05}")
    done = mptrain("compare", str(config), "--policies", "float32,float16,mixed_bfloat16",
                   cwd=tmp_path, env_extra={"COLUMNS": "80", "MPTRAIN_MEMORY_BYTES": str(100 * 2**20)})
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    record = CompareRecord.model_validate_json(
        next((tmp_path / "runs").glob("compare-*/compare.json")).read_text())
    f16 = record.variants[1]
    assert f16.summary.status == "diverged" and f16.summary.non_finite_loss_steps > 0
    assert f16.verdict.words().startswith("diverged (NaN/inf loss)")
    assert "diverged" in done.stdout
    assert_nontrivial_png(Path(record.plot))
    assert record.pairs and "each runs in turns with float32-fit alone" in record.pairs
    assert "in pairs:" in done.stdout
    bf16 = record.variants[2]
    assert bf16.baseline_rounds and len(bf16.baseline_rounds) == len(bf16.rounds)
    assert bf16.baseline_rounds != record.variants[0].rounds  # its own pair's float32, not the first's
    copy = Path(record.folder) / f"{record.experiment}-float32-fit-with-mixed_bfloat16-fit"
    assert (copy / "summary.json").is_file()
    paired = bf16.model_copy(update={"label": "x", "rounds": bf16.baseline_rounds})
    assert bf16.speedup == pytest.approx(speed(bf16.model_copy(update={"baseline_rounds": None}),
                                               paired).ratio)


def test_verdict_needs_enough_rounds_and_says_how_many_steps_give_them(tmp_path):
    """With too few rounds in turns, no speed-up: the verdict says why and what would do;
    `runs --compare` of the same two runs says the same (one rule)."""
    config = experiment(tmp_path)
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16",
                   "--loops", "custom", "--steps", "8", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    record = CompareRecord.model_validate_json(done.stdout)
    f32, bf16 = record.variants
    assert all(row.summary.steps_run == 8 and row.summary.stop_reason for row in record.variants)
    assert [row.summary.loop for row in record.variants] == ["custom", "custom"]  # --loops applied
    assert bf16.speedup is None and len(bf16.rounds) == 2
    words = bf16.verdict.words()
    assert words.startswith("not timed: 2 round(s) in turns, 3 needed: --steps 16 gives 3"), words
    # the 8 steps asked for are the runs' planned end, not an early stop (both said so)
    assert "stopped early" not in words and f32.verdict.words() == "baseline"
    side = mptrain("runs", "--compare", f32.run_dir, bf16.run_dir, "--json", cwd=tmp_path)
    assert side.returncode == 0, side.stderr
    again = CompareRecord.model_validate_json(side.stdout).variants[1]
    assert again.speedup is None and again.verdict.speed.unknown == bf16.verdict.speed.unknown


def test_the_advice_for_too_few_rounds_followed_literally_gives_them(tmp_path):
    """Runs their epochs ended (6 steps): the advice names --epochs (--steps only caps the
    steps the epochs give, and `--steps 16` once changed nothing), and the compare it names
    is timed."""
    config = experiment(tmp_path, "train.epochs=1")
    first = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    words = CompareRecord.model_validate_json(first.stdout).variants[1].verdict.words()
    advice = re.search(r"needed: (--\w+) (\d+) gives 3", words)
    assert advice is not None and advice.group(1) == "--epochs", words
    again = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", *advice.groups(),
                    "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    followed = CompareRecord.model_validate_json(again.stdout).variants[1]
    assert followed.speedup is not None and len(followed.rounds) >= 3, followed.verdict.words()


def test_compare_takes_a_candidate_plan_prints_and_runs_xla_beside_its_control(tmp_path, monkeypatch):
    """A plan's pick is checked with the tool meant for checking: same name, same settings.
    On a CPU recorded as one whose float16 kernel collapses without XLA, mixed_float16 runs
    with XLA: its row is named so, and float32+xla runs beside it as its control, so its
    verdict also gives the precision's own effect (issue 49)."""
    import tensorflow as tf

    from mptrain.hardware.machine import probe
    from tests.helpers import record_kernels

    monkeypatch.setenv("MPTRAIN_CACHE_DIR", str(tmp_path / "cache"))
    record_kernels(probe(tf, check_xla=False), bfloat16=1.0, float16=0.001)
    config = experiment(tmp_path, "train.epochs=1")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_float16", cwd=tmp_path,
                   env_extra={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "mixed_float16 runs with XLA here" in done.stderr and "0.001x" in done.stderr
    record = CompareRecord.model_validate_json(
        (next((tmp_path / "runs").glob("compare-*")) / "compare.json").read_text())
    assert [row.label for row in record.variants] == ["float32-fit", "mixed_float16-xla-fit",
                                                      "float32-xla-fit"]
    pick, control = record.variants[1:]
    assert pick.summary.policy == "mixed_float16" and pick.summary.jit_compile is True
    assert control.summary.policy == "float32" and control.summary.jit_compile is True
    assert not record.variants[0].summary.jit_compile
    assert pick.verdict.control == "float32-xla-fit" and pick.verdict.against_control is not None
    # the note under the table says it
    alone = pick.verdict.precision_alone()  # "precision alone 0.93x float32-xla-fit's (...)"
    assert "float32-xla-fit" in alone and alone in " ".join(done.stdout.split())
    assert any("runs with XLA here" in note for note in record.notes)
    assert [row.summary.candidate for row in record.variants] == ["float32", "mixed_float16+xla",
                                                                  "float32+xla"]
    listed = mptrain("runs", str(tmp_path / "runs"), cwd=tmp_path)  # runs names the candidate too
    assert listed.returncode == 0 and "mixed_float16+xla fit" in listed.stdout, listed.stdout
    bad = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16+fast", cwd=tmp_path)
    assert bad.returncode == 2 and "--policies 'mixed_bfloat16+fast': 'fast' is not one of +xla, " \
        "a math mode" in bad.stderr
    typo = mptrain("compare", str(config), "--policies", "float32,mixed_fp16", cwd=tmp_path)
    assert typo.returncode == 2 and "--policies 'mixed_fp16' is not a policy (did you mean " \
        "mixed_float16?)" in typo.stderr and "Traceback" not in typo.stderr


@pytest.mark.parametrize(("args", "said"), [
    (["--policies", "float32,float32"], "more than once"),
    (["--batch-sizes", "64,0"], "--batch-sizes '64,0': give whole numbers of at least 1"),
    (["--batch-sizes", "64,4096"], "--batch-sizes: 4096 is more than the 384 training examples"),
])
def test_bad_policies_or_batch_sizes_through_cli_run_nothing(tmp_path, args, said):
    config = experiment(tmp_path)
    done = mptrain("compare", str(config), *args, cwd=tmp_path)
    assert done.returncode == 2 and said in " ".join(done.stderr.split()), done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_compare_with_missing_data_leaves_nothing(tmp_path):
    config = experiment(tmp_path, "data.dataset=npz", f"data.path={tmp_path / 'none.npz'}")
    done = mptrain("compare", str(config), "--policies", "float32,mixed_bfloat16", cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def test_compare_without_config_explains_the_default(tmp_path):
    """The README's headline command, offline: say that no CONFIG means the guide's MNIST
    experiment and name what runs here instead."""
    offline = {"HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
               "KERAS_HOME": str(tmp_path / "empty")}
    # a process of its own: urllib keeps the proxies it first saw for the process's life
    done = mptrain("compare", "--policies", "float32,mixed_float16", cwd=tmp_path, env_extra=offline,
                   process=True)
    assert done.returncode == 2, done.stderr
    assert "No CONFIG was given" in done.stderr and "mnist_mixed" in done.stderr
    assert "mptrain compare synthetic" in done.stderr and "Traceback" not in done.stderr


def test_compare_across_batch_sizes_judges_each_cell_by_its_time_to_float32s_loss(tmp_path):
    """The guide's second lever: every policy at each batch, the learning rate by the declared
    rule, every cell on the same examples; compare.json holds each cell's way to the
    baseline's loss."""
    config = experiment(tmp_path, "train.epochs=3", "train.lr_scaling=linear")
    done = mptrain("compare", str(config), "--policies", "float32", "--batch-sizes", "64,128",
                   "--json", cwd=tmp_path)  # every policy at each size: test_verdicts.py
    assert done.returncode == 0, done.stderr[-3000:]
    record = CompareRecord.model_validate(json.loads(done.stdout))
    rows = {row.label: row for row in record.variants}
    assert list(rows) == ["float32-fit@b64", "float32-fit@b128"]
    assert record.baseline == "float32-fit@b64"
    for label, row in rows.items():
        batch = 128 if label.endswith("@b128") else 64
        s = row.summary
        assert s.batch_size == batch and s.steps_run == 3 * 384 // batch  # the same examples
        ran = yaml.safe_load((Path(s.run_dir) / "config.yaml").read_text())["train"]
        if batch == 128:  # linear: twice tiny's 0.01, warmed up from it (written as plain keys)
            assert ran["optimizer"]["schedule"]["learning_rate"] == pytest.approx(0.02)
            assert ran["optimizer"]["schedule"]["warmup_from"] == pytest.approx(0.01)
            assert row.verdict.training is None  # other batches: judged over examples instead
        else:
            assert ran["optimizer"]["kwargs"]["learning_rate"] == pytest.approx(0.01)
        target = row.verdict.to_target
        assert target is not None and target.seen == 3 * 384, label
        assert target.target_loss > 0 and (target.reached or "did not reach" in " ".join(
            row.verdict.refused))
    base = rows["float32-fit@b64"].verdict.to_target
    assert base.reached and base.speedup == pytest.approx(1.0)
    # the per-example speed-up is what a step of twice the work is weighed by
    cell = rows["float32-fit@b128"]
    assert cell.speedup == pytest.approx(speed(cell, rows["float32-fit@b64"]).ratio)
    text = as_text(compare_tables)(record)
    assert "batch sizes: the way to float32-fit@b64's training loss" in text
    assert "speed-up is per example" in text
    refused = mptrain("compare", "--resume", record.folder, "--batch-sizes", "64", cwd=tmp_path)
    assert refused.returncode == 2 and "--batch-sizes 64: a compare resumes" in refused.stderr


def test_variants_are_weighed_against_the_memory_their_training_state_lives_in(tiny_config, monkeypatch):
    """On a machine with GPUs the variants' training states share a GPU's memory (each
    process's resident memory is the host's): three that fit in this machine's memory do not
    fit together in a GPU (recorded device details) with room for two and a half, where the
    engine then runs them in pairs; one alone fits, at a batch 100 times larger it does not."""
    from dataclasses import replace

    from mptrain.hardware.machine import Machine, gpu_from_details
    from mptrain.measure.memory import too_big_alone, too_big_together, variant_bytes
    from mptrain.runs.experiment import prepare

    monkeypatch.delenv("MPTRAIN_MEMORY_BYTES", raising=False)
    prepared = prepare(tiny_config())

    def on_a_gpu(memory_bytes):
        t4 = gpu_from_details({"device_name": "Tesla T4", "compute_capability": (7, 5)}, memory_bytes)
        return replace(prepared, machine=Machine(cpu=prepared.machine.cpu, gpus=(t4,)))

    state = variant_bytes(on_a_gpu(2**40), "float32", None)
    assert state < variant_bytes(prepared, "float32", None)  # the host's part is not the GPU's
    gpu = on_a_gpu(int(2.5 * state / 0.8))
    cells = {label: ("float32", None) for label in ("float32", "again", "once more")}
    assert too_big_together(prepared, cells, "float32") is None
    said = too_big_together(gpu, cells, "float32")
    assert said and "GiB of GPU memory: each runs in turns with float32 alone" in said
    assert "a process" not in said
    batch = prepared.config.train.batch_size
    assert too_big_alone(gpu, "float32", batch) is None
    assert "GiB of GPU memory" in too_big_alone(gpu, "float32", 100 * batch)
