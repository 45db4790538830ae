"""`mptrain plan` for real on a small built-in, its refusals, its Ctrl-C and --resume; and
`check-gpu` following the kernel measurement."""

import json
import signal
from pathlib import Path

import pytest
import tensorflow as tf
import yaml

from tests.helpers import experiment, mptrain, mptrain_process, record_kernels, wait_for


def assert_in_turns(stderr: str, labels: list[str], cut: dict[str, int] | None = None) -> None:
    """Every variant's first step, then rounds in which each runs one turn before any runs
    the next: the lines the engine prints as the turns end. `cut`: label → the last round of
    a variant stopped before its end (plan's too-slow rule)."""
    lines = [line for line in stderr.splitlines() if line.startswith("round ")]
    rounds: dict[int, list[str]] = {}
    for line in lines:
        number, label = line.removeprefix("round ").split(":")[0].split(" · ")
        rounds.setdefault(int(number), []).append(label)
    assert len(rounds) >= 3, stderr[-2000:]
    seen = [int(line.removeprefix("round ").split(" · ")[0]) for line in lines]
    assert seen == sorted(seen)  # round r+1 starts only when every variant has run round r
    cut = cut or {}
    assert all(sorted(members) == sorted(x for x in labels if number <= cut.get(x, number))
               for number, members in rounds.items()), rounds


def test_plan_on_a_built_in_measures_chooses_and_writes_a_runnable_plan(tmp_path):
    # (no race: every trial, the 2x batch cell too, runs its 16 steps whatever a loaded host
    # does to a round; the race's own rules are tests/unit/test_plan.py's)
    done = mptrain("plan", "synthetic", "--candidates", "mixed_bfloat16,float32+onednn_bf16",
                   "--steps", "16", "--no-race", "--set", "train.lr_scaling=sqrt", "--json",
                   cwd=tmp_path, env_extra={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    # a 16-bit trial may be stopped as too slow to win in a round the loaded host slowed (an
    # AMX Xeon ran this tiny MLP's bfloat16 turn at 2.7x float32's under the parallel suite):
    # the rule at work, said in its row and refused; every other trial runs to its end
    cut = {t["label"]: len(t["rounds"]) for t in record["trials"]
           if t["summary"]["stop_reason"].startswith("too slow to win")}
    assert not {"float32", "float32-twin"} & set(cut)
    assert all("too slow" in " ".join(t["verdict"]["refused"]) for t in record["trials"]
               if t["label"] in cut)
    assert_in_turns(done.stderr, [t["label"] for t in record["trials"]], cut)
    ran = [t for t in record["trials"] if t["label"] not in cut]
    for trial in ran:  # the rounds every speed-up is computed from, in the record
        assert len(trial["rounds"]) == 3 and trial["summary"]["turn_wait_s"] > 0, trial["label"]
        assert trial["summary"]["time_to_first_step_s"] > 0 and trial["verdict"]["whole_run_s"] > 0
        # the whole run counts the evaluations, the saved model (synthetic saves it) and the
        # process outside mptrain's clock
        assert trial["summary"]["evaluation_s"] > 0 and trial["overhead_s"] > 0
        assert trial["summary"]["model_save_s"] > 0
        assert record["experiment_eval_batches"] > 0
    names = [t["label"] for t in record["trials"]]
    assert names[:4] == ["float32", "float32-twin", "mixed_bfloat16", "float32+onednn_bf16"] or \
        names[:4] == ["float32", "float32-twin", "float32+onednn_bf16", "mixed_bfloat16"]
    twin = record["trials"][1]  # float32 again, in the same rounds: the A/A test
    assert twin["summary"]["policy"] == "float32" and twin["verdict"]["speed"]["interval"]
    doubled = next(t for t in record["trials"] if t["label"] == "mixed_bfloat16@b512")
    for trial in ran:
        s = trial["summary"]
        assert s["steps_run"] == (9 if trial is doubled else 16) and s["step_time"]["enough"], \
            trial["label"]
        if trial["label"] not in ("float32", "float32-twin") and trial is not doubled:
            assert trial["verdict"]["training"]["share"] is not None  # its loss progress
    # the guide's second lever by default: the most promising 16-bit policy at twice the batch,
    # on the same examples (9 steps of 512 cover 16 of 256 over the epoch's short batch), its
    # learning rate by the declared rule, judged by its time to float32's loss
    s = doubled["summary"]
    assert s["batch_size"] == 512 and doubled["verdict"]["training"] is None
    base_seen = record["trials"][0]["verdict"]["to_target"]["seen"]
    assert base_seen <= doubled["verdict"]["to_target"]["seen"] < base_seen + 512
    ran_with = yaml.safe_load((Path(s["run_dir"]) / "config.yaml").read_text())["train"]
    assert ran_with["optimizer"]["kwargs"]["learning_rate"] == pytest.approx(0.001 * 2 ** 0.5)
    folder = Path(record["folder"])
    before = (folder / "plan.json").read_bytes()
    for extra, said in [(["--set", "train.batch_size=32"], "the options given change train.batch_size"),
                        (["--steps", "20"], "--steps 20: a plan resumes with the settings it started"),
                        (["--candidates", "mixed_bfloat16"], "--candidates mixed_bfloat16"),
                        (["--batch-sizes", "256"], "--batch-sizes 256: a plan resumes")]:
        refused = mptrain("plan", "--resume", str(folder), *extra, cwd=tmp_path)
        assert refused.returncode == 2 and said in refused.stderr, refused.stderr
    assert (folder / "plan.json").read_bytes() == before
    onednn = next(t for t in record["trials"] if t["label"] == "float32+onednn_bf16")
    assert onednn["summary"]["policy"] == "float32"  # oneDNN's bf16 math under a float32 policy
    base = record["trials"][0]["summary"]
    bf16 = next(t for t in record["trials"] if t["label"] == "mixed_bfloat16")
    assert bf16["summary"]["first_step_loss"] == pytest.approx(base["first_step_loss"], rel=2e-2)
    # its MFU is read against the ceiling of the math it ran: bfloat16's where oneDNN takes it
    # (against float32's, a float32+graph_bf16 run read 203%)
    from mptrain.hardware.machine import ONEDNN_BFLOAT16_FLAGS, onednn_enabled, probe_cpu

    flags = probe_cpu().flags
    same_peak = bf16 if onednn_enabled(flags) and ONEDNN_BFLOAT16_FLAGS & flags else record["trials"][0]
    def peak(summary):
        return summary["achieved_tflops"] / summary["mfu"]
    assert peak(onednn["summary"]) == pytest.approx(peak(same_peak["summary"]), rel=1e-6)
    assert record["layers"], "the best 16-bit candidate's layers were timed"
    assert {t["layer"] for t in record["layers"]} == {"dense_1", "dense_2", "logits"}
    assert record["winner"] in names and record["reason"] and record["status"] == "finished"
    folder = Path(record["folder"])
    assert (folder / "plan.png").is_file() and (folder / "plan.json").is_file()
    plan_file = tmp_path / "synthetic.plan.yaml"
    assert record["plan_file"] == str(plan_file)
    text = plan_file.read_text()
    assert text.startswith(f"# mptrain plan for synthetic: {record['winner']}") and "Measured " in text
    assert '# mptrain-plan: {"machine_key": ' in text  # the stamp `policy: auto` reads
    planned = yaml.safe_load(text)
    pick = next(t for t in record["trials"] if t["label"] == record["winner"])
    winner = pick["candidate"]
    assert planned["policy"] == winner["policy"] and planned["train"]["math_mode"] == winner["math_mode"]
    assert planned["train"]["batch_size"] == pick["summary"]["batch_size"]  # 512 if the 2x cell won
    assert "max_steps" not in planned["train"] or planned["train"]["max_steps"] is None
    table = mptrain("plan", "--resume", str(folder), cwd=tmp_path)
    assert table.returncode == 2 and "the plan has finished" in table.stderr
    # a process of its own, as a user runs it: a pick in oneDNN's bfloat16 math mode sets
    # what TensorFlow reads as it starts (this test's process started it without)
    run = mptrain("run", "synthetic.plan.yaml", "--json", "--set", "train.max_steps=2", cwd=tmp_path,
                  process=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout)["policy"] == winner["policy"]


@pytest.mark.parametrize(("args", "message"), [
    (["--candidates", "float32,fp8"], "--candidates: unknown 'fp8'"),
    (["--candidates", "mixed_float16,float32+tf32_off"], "unknown 'float32+tf32_off'; on this machine"),
    (["--tolerance", "-1"], "--tolerance -1: give a percentage of float32's loss progress, 0 or more"),
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
    plan from half-run trials would be drift again), and --resume continues them, as compare
    resumes (each from its checkpoint, in a new session)."""
    config = experiment(tmp_path, "train.batch_size=8", "model.hidden_units=[64, 64]")
    process = mptrain_process(tmp_path, "plan", str(config), "--steps", "16", "--candidates",
                              "mixed_bfloat16", "--batch-sizes", "8", "--json")  # no 2x cell
    wait_for(process, "round 1 ·")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=300)
    assert process.returncode == 130, stderr[-2000:]
    record = json.loads(stdout)
    assert record["status"] == "interrupted" and f"mptrain plan --resume {record['folder']}" in stderr
    assert record["trials"] and all(t["summary"]["status"] == "interrupted" for t in record["trials"])
    assert not (tmp_path / "exp.plan.yaml").exists()  # no plan from half the trials
    resumed = mptrain("plan", "--resume", record["folder"], "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    final = json.loads(resumed.stdout)
    assert final["status"] == "finished"
    assert {t["label"] for t in final["trials"] if t["summary"]["status"] == "finished"} == {
        "float32", "float32-twin", "mixed_bfloat16"}
    assert all(t["session"] == 2 for t in final["trials"])
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


def test_auto_runs_the_pick_of_the_plan_beside_the_experiment_measured_here(tmp_path):
    """`policy: auto` beside a plan of this experiment made on this machine runs the plan's
    pick (here a math mode the kernels alone never pick) and says so; beside a plan made
    elsewhere it decides on the kernels, and says why the plan was not followed."""
    import os

    import tensorflow as tf

    from mptrain.hardware.kernels import plan_key
    from mptrain.hardware.machine import probe
    from mptrain.precision.planned import stamp
    from tests.helpers import tiny_raw

    config = experiment(tmp_path, "policy=auto", "train.epochs=1")
    here = plan_key(probe(tf, check_xla=False))

    def plan_beside(key):
        raw = tiny_raw(f"output.dir={tmp_path / 'runs'}", "policy=float32", "train.epochs=1",
                       "train.math_mode=graph_bf16")
        (tmp_path / "exp.plan.yaml").write_text(stamp(key, "float32+graph_bf16") + "\n" + yaml.safe_dump(raw))
        later = config.stat().st_mtime + 10
        os.utime(tmp_path / "exp.plan.yaml", (later, later))

    plan_beside(here)
    followed = json.loads(mptrain("run", str(config), "--json", cwd=tmp_path).stdout)
    assert (followed["policy"], followed["policy_requested"], followed["candidate"]) == (
        "float32", "auto", "float32+graph_bf16")
    assert followed["policy_reason"].startswith(f"auto: follows {tmp_path / 'exp.plan.yaml'}")
    plan_beside("another machine")
    kernels = json.loads(mptrain("run", str(config), "--json", cwd=tmp_path).stdout)
    assert kernels["candidate"] != "float32+graph_bf16" and kernels["policy_requested"] == "auto"
    assert any("did not follow the plan" in n and "another machine" in n for n in kernels["notes"])


def test_the_budget_holds_trials_stop_at_it_and_are_judged_on_what_they_measured(tmp_path):
    """A budget far shorter than the trials: no round starts after it, the trials still
    training stop after their round and keep what they measured, and the plan names what the
    budget cut."""
    config = experiment(tmp_path, "train.epochs=500", "train.batch_size=8")
    # turns of 800 steps: a round (three turns) outlasts the 15 s budget here, and ten rounds
    # outlast it on a CPU three times as fast
    done = mptrain("plan", str(config), "--steps", "8000", "--budget", "0.25", "--candidates",
                   "mixed_bfloat16", "--batch-sizes", "8", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    assert record["status"] == "out of budget"
    assert set(record["trials"][i]["label"] for i in range(3)) == {"float32", "float32-twin",
                                                                   "mixed_bfloat16"}
    cut = [t for t in record["trials"] if t["summary"] and t["summary"]["steps_run"] < 8000]
    assert cut and all(t["summary"]["stop_reason"].startswith("cut by the budget") for t in cut)
    assert all(t["summary"]["stopped_by"] == "budget" for t in cut)  # said "(stopped early)"
    assert {t["label"] for t in cut} <= set(record["trials"][i]["label"] for i in range(3))
    assert all(t["rounds"] for t in cut)  # judged on the rounds they ran
    # no round started after the budget: every trial cut after the same round (its turns'
    # steps, in the plan's folder), however long the starts took on a loaded host
    assert len({len(t["rounds"]) for t in cut}) == 1, [t["rounds"] for t in cut]


def other_library() -> tuple[str, str]:
    """The math library this process's TensorFlow runs, and the other one."""
    from tensorflow.python.util import _pywrap_util_port

    return ("onednn", "eigen") if _pywrap_util_port.IsMklEnabled() else ("eigen", "onednn")


@pytest.mark.kernel_path
def test_a_math_library_is_set_as_its_process_starts_and_said(tmp_path):
    """`train.math_library` sets TF_ENABLE_ONEDNN_OPTS before TensorFlow starts: a run of the
    library TensorFlow does not choose here runs it (TensorFlow's own switch says so in the
    process) and its summary, candidate and `mptrain runs` say which ran; a process whose
    TensorFlow has started already (a notebook's: this one) refuses the other library by name,
    and leaves nothing; the library it runs is no change, and runs in it."""
    running, other = other_library()
    config = experiment(tmp_path, "train.epochs=1")
    done = mptrain("run", str(config), "--json", "--set", f"train.math_library={other}",
                   cwd=tmp_path, process=True)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["math_library"] == other and summary["candidate"] == f"float32+{other}"
    assert summary["math_library_reason"] == f"{'oneDNN' if other == 'onednn' else 'Eigen'} " \
                                             f"(train.math_library: {other})"
    listed = mptrain("runs", str(tmp_path / "runs"), cwd=tmp_path, env_extra={"COLUMNS": "120"})
    assert f"float32+{other} fit {'oneDNN' if other == 'onednn' else 'Eigen'}" in listed.stdout
    refused = mptrain("run", str(config), "--set", f"train.math_library={other}", cwd=tmp_path)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"TF_ENABLE_ONEDNN_OPTS={int(other == 'onednn')} must be set before TensorFlow starts" \
        in refused.stderr
    assert [p.name for p in (tmp_path / "runs").iterdir()] == [Path(summary["run_dir"]).name]
    same = json.loads(mptrain("run", str(config), "--json", "--set", f"train.math_library={running}",
                              cwd=tmp_path).stdout)
    assert same["math_library"] == running


@pytest.mark.kernel_path
def test_plan_races_the_other_math_library_and_its_file_names_the_library_measured(tmp_path):
    """The library TensorFlow does not choose here is a candidate of its own (named, it runs
    whatever the kernels said), its trial runs that library, and plan.yaml spells out the
    library its pick ran, which `policy: auto` then runs in a process of its own."""
    running, other = other_library()
    config = experiment(tmp_path, "policy=auto", "train.epochs=1")
    done = mptrain("plan", str(config), "--candidates", f"float32+{other}", "--steps", "16",
                   "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads(done.stdout)
    libraries = {t["label"]: t["summary"]["math_library"] for t in record["trials"]}
    assert libraries == {"float32": running, "float32-twin": running, f"float32+{other}": other}
    assert record["kernel_kinds"] == {"dense": 1.0}  # its FLOPs: all Dense
    pick = record["winner"]
    planned = yaml.safe_load((tmp_path / "exp.plan.yaml").read_text())
    assert planned["train"]["math_library"] == libraries[pick]
    followed = json.loads(mptrain("run", str(config), "--json", cwd=tmp_path, process=True).stdout)
    assert followed["math_library"] == libraries[pick] and followed["policy_requested"] == "auto"
