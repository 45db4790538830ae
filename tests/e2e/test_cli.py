"""The command line as a user runs it: exit codes, stdout/stderr contents (a real process where
the process is the subject: start-up logs, what validate imports)."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers import experiment, mptrain


def test_full_run_through_the_cli_prints_only_json(tmp_path):
    """A real process on the path an AVX2-only CPU takes (oneDNN off), as a user starts it:
    TensorFlow's allocator still keeps the memory peak (mptrain asks for the allocator that
    keeps one), and `--steps` bounds the run."""
    config = experiment(tmp_path, "policy=mixed_float16", "train.loop=custom",
                        "data.input_shape=[256]", "model.hidden_units=[512, 512]")
    env = {k: v for k, v in os.environ.items() if k != "TF_CPU_ALLOCATOR_USE_BFC"}
    done = subprocess.run([sys.executable, "-m", "mptrain", "run", str(config), "--json",
                           "--set", "train.epochs=2", "--steps", "10"], cwd=tmp_path, text=True,
                          capture_output=True, timeout=600,
                          env={**env, "TF_ENABLE_ONEDNN_OPTS": "0", "COLUMNS": "120"})
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # stdout holds exactly one JSON document
    assert summary["policy"] == "mixed_float16" and summary["loop"] == "custom"
    assert summary["steps_run"] == 10 and summary["epochs_run"] == 2
    assert summary["output_dtype"] == "float32"
    assert summary["memory"]["training_peak_bytes"] > 0
    assert summary["loss_scale"]["final"] > 0 and summary["status"] == "finished"
    assert summary["step_time"]["median_ms"] > 0 and summary["examples_per_sec"] > 0
    run_dir = Path(summary["run_dir"])
    assert json.loads((run_dir / "summary.json").read_text())["test_loss"] == summary["test_loss"]
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert resolved["train"]["epochs"] == 2 and resolved["train"]["loop"] == "custom"
    # TensorFlow's start-up chatter stays off the terminal; our progress lines do not, and
    # say the run's skipped steps as the total they are
    assert "epoch 2:" in done.stderr and re.search(r"epoch 2: .*, skipped \d+ in all\n", done.stderr)
    for chatter in CHATTER:
        assert chatter not in done.stderr


CHATTER = ("cuInit", "oneDNN custom operations", "cpu_feature_guard", "absl::", "retracing",
           "XLA service", "cudart_stub")


def test_every_command_keeps_tensorflows_logs_hidden(tmp_path):
    """memory, and plan's choice of candidates, once imported Keras (and so TensorFlow) loudly
    before its quiet import. (A plan whose budget ends while it stages runs no trial.)"""
    config = experiment(tmp_path, "train.epochs=1")
    # (run's own start-up is checked in test_full_run_through_the_cli_prints_only_json)
    for command in (["memory", "--policies", "float32,mixed_float16"], ["diagnose", "--steps", "2"],
                    ["plan", "--budget", "0.01", "--out", str(tmp_path / "exp.plan.yaml")]):
        done = mptrain(command[0], str(config), *command[1:], cwd=tmp_path, process=True)
        assert done.returncode in (0, 1), (command, done.stderr[-2000:])
        assert done.stdout.strip(), command
        for chatter in CHATTER:
            assert chatter not in done.stderr, (command, done.stderr[-2000:])
        # no line of TensorFlow's C++ log (E0000 00:00:... util.cc:131] ...: float16 on a CPU
        # with AVX-512 but not its FP16 part logged one as an error)
        assert not re.search(r"^[IWEF]\d{4} ", done.stderr, re.M), (command, done.stderr[-2000:])


def test_table_output_names_the_measurements(tmp_path):
    config = experiment(tmp_path, "train.epochs=1")
    done = mptrain("run", str(config), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    for label in ("policy", "step time", "median", "throughput", "memory", "run folder"):
        assert label in done.stdout


def test_invalid_config_exits_2_without_traceback_or_folder(tmp_path):
    config = experiment(tmp_path)
    done = mptrain("run", str(config), "--set", "train.batch_size=zero", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: ")  # the first line, no blank above
    assert "exp.yaml" in done.stderr and "train.batch_size = 'zero'" in done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "runs").exists()
    # with --json, the error is one JSON object on stdout (a batch script has one to parse)
    as_json = mptrain("run", str(config), "--json", "--set", "train.batch_size=zero", cwd=tmp_path)
    said = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and said["exit_code"] == 2 and said["run_dir"] is None
    assert "exp.yaml" in said["error"] and "train.batch_size = 'zero'" in said["error"]


def test_missing_dataset_exits_2_with_a_fix(tmp_path):
    config = experiment(tmp_path, "data.dataset=npz", f"data.path={tmp_path / 'no.npz'}")
    done = mptrain("run", str(config), cwd=tmp_path)
    assert done.returncode == 2 and "no such file" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "runs").exists()


def python(code: str, cwd) -> str:
    """Runs `code` in a fresh interpreter (so sys.modules shows what it imported); its stdout."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_validate_prints_resolved_config_without_tensorflow(tmp_path):
    config = experiment(tmp_path)
    code = (
        "import sys; from mptrain.cli import app\n"
        f"sys.argv = ['mptrain', 'validate', {str(config)!r}, '--set', 'train.epochs=9']\n"
        "try:\n    app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "assert 'tensorflow' not in sys.modules, 'validate imported TensorFlow'\n"
        "assert 'rich.progress' not in sys.modules, 'validate imported the progress renderer'\n"
        "assert 'mptrain.training.monitor' not in sys.modules, 'validate imported training'\n"
    )
    resolved = yaml.safe_load(python(code, tmp_path))
    assert resolved["train"]["epochs"] == 9
    assert resolved["train"]["loss_scale"] == {"initial_scale": 32768.0, "dynamic_growth_steps": 2000}


def test_help_lists_commands(tmp_path):
    """Every command, each on its own line of the list with the first words of its help."""
    import typer.main

    from mptrain.cli import app

    done = mptrain("--help", cwd=tmp_path)
    assert done.returncode == 0
    listed = done.stdout.split("Commands:", 1)[1].splitlines()
    group = typer.main.get_command(app)
    for name, command in group.commands.items():
        first_words = " ".join(command.help.split()[:3])
        assert any(line.split()[:1] == [name] and first_words in line for line in listed), name


def test_importing_mptrain_or_its_help_loads_neither_the_schema_nor_tensorflow(tmp_path):
    """`import mptrain` and `mptrain --help` pay for what they use only: the API's functions,
    the experiment schema (pydantic) and TensorFlow load when a function needs them."""
    code = (
        "import sys, mptrain, mptrain.cli\n"
        "sys.argv = ['mptrain', '--help']\n"
        "try:\n    mptrain.cli.app()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "heavy = ('mptrain.api', 'mptrain.config', 'pydantic', 'tensorflow')\n"
        "loaded = [m for m in heavy if m in sys.modules]\n"
        "assert not loaded, loaded\n"
        "assert callable(mptrain.load_experiment) and 'mptrain.config' in sys.modules\n"
        "assert 'tensorflow' not in sys.modules\n"
    )
    python(code, tmp_path)


def test_builtin_config_by_name(tmp_path):
    done = mptrain("validate", "mnist_mixed", cwd=tmp_path)
    assert done.returncode == 0 and yaml.safe_load(done.stdout)["train"]["batch_size"] == 8192
    listing = mptrain("configs", cwd=tmp_path)
    assert "fashion_mnist_mixed" in listing.stdout


def test_version_and_short_help(tmp_path):
    from mptrain import __version__

    assert mptrain("--version", cwd=tmp_path).stdout.strip() == f"mptrain {__version__}"
    short = mptrain("run", "-h", cwd=tmp_path)
    assert short.returncode == 0 and "--set" in short.stdout and "<bool>" not in short.stdout


def test_a_reader_that_stops_early_is_not_an_error(tmp_path):
    """`mptrain validate x | head -1`: the pipe closes before mptrain writes; exit 0, quietly."""
    process = subprocess.Popen([sys.executable, "-m", "mptrain", "validate", "synthetic"],
                               cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert b"Traceback" not in stderr and b"BrokenPipe" not in stderr


def test_set_errors_name_the_option_and_suggest_the_key(tmp_path):
    done = mptrain("validate", "synthetic", "--set", "trian.epochs=2", cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--set trian.epochs=2: trian: unknown key (did you mean train?)" in done.stderr
    assert "mptrain/configs" not in done.stderr  # not the packaged file's path


def test_check_gpu_says_whether_it_measured_now_or_read_the_cache(tmp_path):
    env = {"MPTRAIN_CACHE_DIR": str(tmp_path / "cache"), "COLUMNS": "100"}
    first = mptrain("check-gpu", cwd=tmp_path, env_extra=env)
    assert first.returncode == 0, first.stderr
    assert "kernels measured now" in first.stdout and "(cached" not in first.stdout
    again = mptrain("check-gpu", "--json", cwd=tmp_path, env_extra=env)
    report = json.loads(again.stdout)
    assert report["kernels_cached"] is True
    if not report["machine"]["gpus"]:  # TF32 is a GPU mode: not "enabled" on a CPU
        assert report["machine"]["tf32_enabled"] is None
        assert "TF32 execution" not in first.stdout or "n/a" in first.stdout


def test_tensorflow_starts_without_kerass_optional_imports_which_import_after(tmp_path):
    """Keras imports scikit-learn, matplotlib and pandas when installed (2.0 s of a process's
    5.9 s start here); mptrain's processes start it without them, and a user's code can still
    import them. They ask for GPU memory that grows as needed (several share one GPU)."""
    code = (
        "import os, sys\n"
        "from mptrain.hardware.runtime import import_tensorflow\n"
        "os.environ.pop('TF_FORCE_GPU_ALLOW_GROWTH', None)\n"
        "import_tensorflow()\n"
        "assert os.environ['TF_FORCE_GPU_ALLOW_GROWTH'] == 'true'\n"
        "assert 'keras' in sys.modules\n"
        "skipped = [m for m in ('sklearn', 'matplotlib', 'pandas') if m in sys.modules]\n"
        "assert not skipped, skipped\n"
        "import sklearn, matplotlib.pyplot, pandas\n"
    )
    python(code, tmp_path)
