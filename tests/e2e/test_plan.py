"""`mptrain plan` for real on a small built-in, its refusals, its Ctrl-C and --resume; and
`check-gpu` following the kernel measurement."""

import json
import signal
from pathlib import Path

import pytest
import yaml

from tests.helpers import experiment, mptrain, mptrain_process, record_kernels, wait_for

tf = pytest.importorskip("tensorflow")


def assert_in_turns(stderr: str, labels: list[str]) -> None:
    """Every variant's first step, then rounds in which each runs one turn before any runs
    the next: the lines the engine prints as the turns end."""
    lines = [line for line in stderr.splitlines() if line.startswith("round ")]
    rounds: dict[int, list[str]] = {}
    for line in lines:
        number, label = line.removeprefix("round ").split(":")[0].split(" · ")
        rounds.setdefault(int(number), []).append(label)
    assert len(rounds) >= 3, stderr[-2000:]
    seen = [int(line.removeprefix("round ").split(" · ")[0]) for line in lines]
    assert seen == sorted(seen)  # round r+1 starts only when every variant has run round r
    assert all(sorted(members) == sorted(labels) for members in rounds.values()), rounds


def test_plan_on_a_built_in_measures_chooses_and_writes_a_runnable_plan(tmp_path):
    done = mptrain("plan", "synthetic", "--candidates", "mixed_bfloat16,float32+onednn_bf16",
                   "--steps", "16", "--json", cwd=tmp_path, env_extra={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    assert_in_turns(done.stderr, [t["candidate"]["name"] for t in record["trials"]])
    for trial in record["trials"]:  # the rounds every speed-up is computed from, in the record
        assert len(trial["rounds"]) == 3 and trial["summary"]["turn_wait_s"] > 0
        assert trial["summary"]["time_to_first_step_s"] > 0 and trial["whole_run_s"] > 0
        # the whole run counts the evaluations, the saved model (synthetic saves it) and the
        # process outside mptrain's clock
        assert trial["summary"]["evaluation_s"] > 0 and trial["overhead_s"] > 0
        assert trial["summary"]["model_save_s"] > 0
        assert record["experiment_eval_batches"] > 0
    names = [t["candidate"]["name"] for t in record["trials"]]
    assert names[:3] == ["float32", "mixed_bfloat16", "float32+onednn_bf16"] or \
        names[:3] == ["float32", "float32+onednn_bf16", "mixed_bfloat16"]
    for trial in record["trials"]:
        s = trial["summary"]
        assert s["steps_run"] == 16 and s["step_time"]["enough"], trial["candidate"]["name"]
        assert trial["loss_delta_pct"] is not None and trial["verdict"]
    onednn = next(t for t in record["trials"] if t["candidate"]["name"] == "float32+onednn_bf16")
    assert onednn["summary"]["policy"] == "float32"  # oneDNN's bf16 math under a float32 policy
    base = record["trials"][0]["summary"]
    bf16 = next(t for t in record["trials"] if t["candidate"]["name"] == "mixed_bfloat16")
    assert bf16["summary"]["first_step_loss"] == pytest.approx(base["first_step_loss"], rel=2e-2)
    assert record["layers"], "the best 16-bit candidate's layers were timed"
    assert {t["layer"] for t in record["layers"]} == {"dense_1", "dense_2", "logits"}
    assert record["winner"] in names and record["reason"] and record["status"] == "finished"
    folder = Path(record["folder"])
    assert (folder / "plan.png").is_file() and (folder / "plan.json").is_file()
    plan_file = tmp_path / "synthetic.plan.yaml"
    assert record["plan_file"] == str(plan_file)
    text = plan_file.read_text()
    assert text.startswith(f"# mptrain plan for synthetic: {record['winner']}") and "Measured " in text
    planned = yaml.safe_load(text)
    winner = next(c for c in record["candidates"] if c["name"] == record["winner"])
    assert planned["policy"] == winner["policy"] and planned["train"]["math_mode"] == winner["math_mode"]
    assert "max_steps" not in planned["train"] or planned["train"]["max_steps"] is None
    table = mptrain("plan", "--resume", str(folder), cwd=tmp_path)
    assert table.returncode == 2 and "the plan has finished" in table.stderr
    run = mptrain("run", "synthetic.plan.yaml", "--json", "--set", "train.max_steps=2", cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["policy"] == winner["policy"]


@pytest.mark.parametrize(("args", "message"), [
    (["--candidates", "float32,fp8"], "--candidates: unknown 'fp8'"),
    (["--candidates", "mixed_float16,float32+tf32_off"], "unknown 'float32+tf32_off'; on this machine"),
    (["--tolerance", "-1"], "--tolerance -1: give a percentage of float32's loss, 0 or more"),
    (["--budget", "0"], "--budget 0: give the minutes plan may take, more than 0"),
])
def test_bad_plan_input_is_refused_and_leaves_nothing(tmp_path, args, message):
    config = experiment(tmp_path)
    done = mptrain("plan", str(config), *args, cwd=tmp_path)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert message in " ".join(done.stderr.split()), done.stderr
    assert not (tmp_path / "runs").exists() and not list(tmp_path.glob("*.plan.yaml"))


def test_ctrl_c_stops_the_trials_in_turn_and_resume_runs_them(tmp_path):
    """The trials run in turns, so a Ctrl-C stops them all mid-trial: none is a result (a
    plan from half-run trials would be drift again), and --resume runs them all anew."""
    config = experiment(tmp_path, "train.batch_size=8", "model.hidden_units=[64, 64]")
    process = mptrain_process(tmp_path, "plan", str(config), "--steps", "16", "--candidates",
                              "mixed_bfloat16", "--json")
    wait_for(process, "round 1 ·")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-2000:]
    record = json.loads(stdout)
    assert record["status"] == "interrupted" and f"mptrain plan --resume {record['folder']}" in stderr
    assert record["trials"] and all(t["failed"] == "interrupted" for t in record["trials"])
    assert not (tmp_path / "exp.plan.yaml").exists()  # no plan from half the trials
    resumed = mptrain("plan", "--resume", record["folder"], "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads(resumed.stdout)
    assert final["status"] == "finished"
    assert {t["candidate"]["name"] for t in final["trials"] if t["summary"]} >= {
        "float32", "mixed_bfloat16"}
    assert (tmp_path / "exp.plan.yaml").is_file()


@pytest.mark.parametrize(("bf16_ratio", "policy"), [(0.8, "float32"), (2.5, "mixed_bfloat16")])
def test_check_gpu_recommends_what_the_measurement_says(tmp_path, monkeypatch, bf16_ratio, policy):
    from mptrain.hardware.machine import probe

    env = {"MPTRAIN_CACHE_DIR": str(tmp_path / "cache")}
    monkeypatch.setenv("MPTRAIN_CACHE_DIR", env["MPTRAIN_CACHE_DIR"])
    record_kernels(probe(tf, check_xla=False), bfloat16=bf16_ratio)
    done = mptrain("check-gpu", "--json", cwd=tmp_path, env_extra=env)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["recommendation"]["policy"] == policy and report["recommendation"]["measured"]
    assert f"{bf16_ratio:.2f}x float32" in report["recommendation"]["reason"]
    assert report["kernels"]["timings"] and report["bench"] is None
    rules = json.loads(mptrain("check-gpu", "--json", "--no-bench", cwd=tmp_path, env_extra=env).stdout)
    assert rules["recommendation"]["measured"] is False and rules["kernels"] is None
