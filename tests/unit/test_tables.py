"""Every table at 80 columns, on records built here (nothing trains): no line is wider, and
every number and every name a user copies into a command (runs, variants, layers, policies,
candidates) is whole on one line, however long the names and wide the numbers."""

import io
import re

from rich.console import Console

from mptrain.measure.compare import CompareRecord, judge_compare
from mptrain.measure.islands import LayerTiming
from mptrain.measure.plan import PlanRecord
from mptrain.measure.variant import QualityDelta, Speed, Training, Variant, Verdict
from mptrain.precision.candidates import Candidate
from mptrain.report.tables import compare_tables, plan_tables, summary_table
from mptrain.report.views import check_gpu_view, diagnose_view, lint_view, memory_view, runs_table
from mptrain.runs.folder import RunRow, RunsReport
from tests.helpers import compare_row, make_summary

RUN = "synthetic-mixed_float16-custom-20261201-120000"
NESTED = "compare-synthetic-20261201-120000/synthetic-mixed_bfloat16-fit"  # 62 columns
SHORT = "synthetic-20261201-120000"
LAYER = "transformer_encoder_block_11/multi_head_attention/query_dense"
FOLDER = "/home/someone/precision/runs/" + RUN  # 75 columns: fits a line, not beside a key


def rendered(renderable) -> str:
    console = Console(width=80, record=True, file=io.StringIO())
    console.print(renderable)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text, text
    return text


def whole(text: str, *cells: str) -> None:
    """Each cell on one line of `text` (a cell cut in two has a line break inside it)."""
    for cell in cells:
        assert cell in text, f"{cell!r} is not whole on one line:\n{text}"


def leads_a_line(text: str, name: str) -> None:
    """A name in a table's first column: at a line's start, whole."""
    assert re.search(rf"^{re.escape(name)}( |$)", text, re.MULTILINE), f"{name!r}:\n{text}"


def test_runs_names_are_each_on_one_line_as_compare_takes_them():
    when = "2026-12-01T12:00:00"
    report = RunsReport(folder="runs", runs=[
        RunRow(name=RUN, path="x", status="interrupted", resumable=True, policy="mixed_float16",
               loop="custom", epochs=120, median_step_ms=12345.6, test_quality="accuracy 0.9123", when=when),
        RunRow(name=NESTED, path="x", status="finished", resumable=False, policy="mixed_bfloat16",
               loop="fit", epochs=3, median_step_ms=1.2, test_quality="MAE 2.41", when=when),
        RunRow(name=SHORT, path="x", status="killed", resumable=True, reason="process 7 is gone",
               policy="float32", loop="fit", epochs=2, when=when),
    ])
    text = rendered(runs_table(report))
    for name in (RUN, NESTED, SHORT):
        leads_a_line(text, name)
    whole(text, "interrupted*", "12345.6", "accuracy 0.9123", "MAE 2.41", "mixed_float16 custom", "120")
    # a name that fits keeps its row; the others have their own line above theirs
    assert re.search(rf"^{SHORT} +killed\* +2 ", text, re.MULTILINE), text
    assert re.search(r"^mixed_float16 custom +interrupted\* +120 +12345\.6", text, re.MULTILINE)


def test_compare_tables_keep_numbers_names_and_verdicts_whole():
    """`compare` (policy and loop name a row) and `runs --compare` (run names)."""
    policies = ["float32", "mixed_bfloat16", "mixed_float16", "float16", "bfloat16"]
    summaries = [make_summary(median=12345.6, accuracy=0.9123, memory=1_234_567_890),
                 make_summary(median=321.9, accuracy=0.7912, memory=61_234_567, policy="mixed_bfloat16"),
                 make_summary(median=14567.8, accuracy=0.9101, memory=70_000_000,
                              scale=(32768.0, 1234), policy="mixed_float16"),
                 "exit code 3", make_summary(median=1500.0, status="diverged", policy="bfloat16")]
    rows = [compare_row(p, "custom", "mirrored", summary=None if isinstance(s, str) else s,
                        failed=s if isinstance(s, str) else None)
            for p, s in zip(policies, summaries, strict=True)]
    record = judge_compare(CompareRecord(experiment="synthetic", folder="/tmp/x", baseline=rows[0].label,
                                  baseline_policy="float32", variants=rows))
    text = rendered(compare_tables(record))
    whole(text, "12345.6", "321.9", "38.35x", "0.7912 (-12.11)", "0.9101 (-0.22)", "32768/1234",
          "12098.7–12592.5", "14276.4–14859.2", "1.1 GiB 1.00x", "58.4 MiB 0.05x",
          "mixed_bfloat16", "mixed_float16", "custom mirrored", "ms/step", "speed-up", "TFLOP/s",
          "verdict", "MFU")
    for row in record.variants:  # the verdicts wrap between words, none dropped
        whole(text, *row.verdict.words().split())
    assert re.search(r"^bfloat16\b.*diverged", text, re.MULTILINE), text

    named = [compare_row(s.policy, s.loop, label=n, summary=s)
             for n, s in ((RUN, summaries[0]), (NESTED, summaries[1]), (SHORT, summaries[2]))]
    record = judge_compare(record.model_copy(update={"variants": named, "baseline": RUN}))
    text = rendered(compare_tables(record))
    for name in (RUN, NESTED, SHORT):
        leads_a_line(text, name)
    whole(text, "12345.6", "321.9", "38.35x", "0.7912 (-12.11)", "32768/1234", "12098.7–12592.5",
          "1.1 GiB 1.00x", "verdict",
          *(word for row in record.variants for word in row.verdict.words().split()))
    # runs made apart (no turns): their speed-ups can be the machine's drift, and it is said
    whole(text, "not", "measured", "in", "turns", "drift")
    turns = rendered(compare_tables(record.model_copy(update={"turn_steps": 50})))
    assert "not measured in turns" not in " ".join(turns.split())


def test_plan_tables_keep_candidates_layers_and_numbers_whole():
    names = ("float32", "mixed_bfloat16+xla", "float32+onednn_bf16", "mixed_float16+xla")
    found = [Candidate(name=n, policy=n.split("+")[0]) for n in names]
    trials = [Variant(label=c.name, candidate=c, run_dir="/tmp/x",
                    summary=make_summary(median=12345.6 / (i + 1)),
                    verdict=Verdict(baseline=i == 0, whole_run_s=5400.0 / (i + 1), speed=Speed(
                        ratio=float(i + 1), interval=(i + 0.9, i + 1.1), word="faster"),
                        training=Training(share=1 - 0.123 * i, shortfall=0.1, allowance=0.2,
                                          behind=False)))
              for i, c in enumerate(found)]
    layers = [LayerTiming(layer=LAYER, ms_16bit=1234.56, ms_float32=987.65,
                          spread_16bit=(1200.0, 1300.0), spread_float32=(900.0, 1000.0)),
              LayerTiming(layer="dense_1", ms_16bit=1.5, ms_float32=3.0, spread_16bit=(1.4, 1.6),
                          spread_float32=(2.9, 3.1))]
    record = PlanRecord(experiment="synthetic", folder="/tmp/plan", machine="m", measured_at="t",
                        steps=30, tolerance_pct=3.0, evaluate=False, budget_minutes=20.0,
                        candidates=found, trials=trials, layers=layers,
                        winner="mixed_float16+xla", reason="4.00x float32")
    text = rendered(plan_tables(record))
    for name in (*names, LAYER, "dense_1"):
        leads_a_line(text, name)
    whole(text, "12345.6", "90 min", "45 min", "4.00x", "63.1%", "1234.56", "987.65", "0.80x",
          "ms/step", "speed-up", "progress", "verdict", "faster")


def test_a_trial_not_run_says_why_the_plan_left_it():
    """An interrupt leaves trials untried as the budget does: each says which it was."""
    tried = Variant(label="float32", candidate=Candidate(name="float32", policy="float32"),
                    summary=make_summary(), verdict=Verdict(baseline=True))
    left = Variant(label="mixed_bfloat16", candidate=Candidate(name="mixed_bfloat16",
                                                               policy="mixed_bfloat16"))
    words = {}
    for status in ("interrupted", "out of budget", "running"):
        record = PlanRecord(experiment="synthetic", folder="/tmp/plan", machine="m", measured_at="t",
                            steps=30, tolerance_pct=3.0, evaluate=False, budget_minutes=20.0,
                            candidates=[], trials=[tried, left], status=status, winner="float32")
        (line,) = [line for line in rendered(plan_tables(record)).splitlines()
                   if line.startswith("mixed_bfloat16")]
        words[status] = line
    assert "not run (interrupted)" in words["interrupted"] and "budget" not in words["interrupted"]
    assert "not run (budget spent)" in words["out of budget"]
    assert "waiting" in words["running"]


def test_summary_keeps_its_run_folder_on_one_line():
    text = rendered(summary_table(make_summary(
        name="synthetic", median=12345.6, scale=(32768.0, 1234), run_dir=FOLDER,
        notes=["a note long enough to wrap over more than one line of the table's values, "
               "with a path in it: /tmp/x"])))
    whole(text, FOLDER, "median 12345.6 ms", "p10 12098.7", "p90 12592.5", "32768",
          "skipped steps 1234")
    xla = make_summary(policy="mixed_bfloat16").model_copy(update={"candidate": "mixed_bfloat16+xla"})
    whole(rendered(summary_table(xla)), "candidate mixed_bfloat16+xla")  # as plan and compare name it


def test_the_memory_line_says_what_the_allocator_saw_or_that_it_saw_nothing():
    def memory_line(**memory) -> str:
        summary = make_summary(memory=2048)
        summary = summary.model_copy(update={"memory": summary.memory.model_copy(update=memory)})
        words = " ".join(rendered(summary_table(summary)).split())  # the cell, unwrapped
        return words.split("memory ", 1)[1].split(" wall time")[0]

    assert memory_line().startswith("training 2.0 KiB (peak on CPU:0 above the 10 B data set);")
    assert memory_line(data_bytes=0).startswith("training 2.0 KiB (peak on CPU:0);")  # streamed
    unseen = memory_line(data_bytes=0, training_peak_bytes=None, device_peak_bytes=None)
    assert unseen.startswith("training not measured (TensorFlow's allocator on CPU:0 kept no "
                             "statistics);") and "n/a" not in unseen


def test_check_gpu_panel_keeps_every_measurement_whole():
    from mptrain.hardware.kernels import KernelTiming
    from mptrain.precision.check import CheckReport, CpuFacts, GpuFacts, MachineFacts
    from mptrain.precision.policy import Recommendation

    gpu = GpuFacts(name="NVIDIA GeForce RTX 4090 Laptop GPU", compute_capability=(8, 9),
                   memory_bytes=85_000_000_000, float16_tensor_cores=True, fast_bfloat16=True,
                   tf32_by_default=True, float8=True)
    machine = MachineFacts(cpu=CpuFacts(model="AMD EPYC 7B13 64-Core Processor", physical_cores=64,
                                        logical_cpus=128, mhz=2450.0, features={"AVX-512": True}),
                           gpus=[gpu], tpu=False, tensorflow_version="2.21.0", keras_version="3.13.0",
                           onednn=True, xla=True, tf32_enabled=True)
    bench = [KernelTiming(device="/GPU:0", kernel=kernel, dtype=dtype, ms_per_call=1234.56,
                          ms_p10=1200.01, ms_p90=1300.99, tflops=123.456, calls=1, cut_short=True,
                          ratio_to_float32=0.803)
             for kernel in ("matmul 1024²", "conv3x3 16×56²×64") for dtype in ("float32", "bfloat16")]
    report = CheckReport(machine=machine, gpu_found=True, compatibility_check="ok",
                         recommendation=Recommendation(policy="mixed_bfloat16", reason="why",
                                                       warnings=[], measured=True),
                         distribution=None, kernels=None, bench=bench)
    text = rendered(check_gpu_view(report))
    whole(text, "8.9", "79.2 GiB", "1234.56*", "1200.01–1300.99", "123.456", "0.803", "bfloat16",
          "conv3x3", "16×56²×64", "fp16 TC", "fast bf16", "TFLOP/s", "× fp32", "* 1 call, cut short")


def test_lint_keeps_layer_names_whole():
    from mptrain.precision.lint import Finding, LintReport

    findings = [Finding(kind="softmax_16bit", severity="warning", layer=LAYER, flops_share=0.456,
                        message=f"{LAYER}: softmax in float16; keep it float32 with "
                                f"model.float32_layers: [{LAYER}]"),
                Finding(kind="alignment", severity="info", layer="dense_1", flops_share=0.001,
                        message="dense_1: units 100 is not a multiple of 8; set model.hidden_units"),
                Finding(kind="alignment", severity="warning", layer=None,
                        message="batch size 100 is not a multiple of 8; set train.batch_size"),
                # a word wider than the room beside the numbers folds; the numbers stay whole
                Finding(kind="policy_ignored", severity="info", layer="dense_2", flops_share=0.123,
                        message=f"dense_2: outputs float32 in {FOLDER}")]
    report = LintReport(experiment="synthetic", policy="mixed_float16", device="GPU:0",
                        alignment_for="Tensor Cores", flops_per_example=123_456_789_012,
                        operations=12, findings=findings)
    text = rendered(lint_view(report))
    for name in (LAYER, "dense_1", "dense_2"):
        leads_a_line(text, name)
    whole(text, f"[{LAYER}]", "46%", "0%", "12%", "123,456,789,012", "train.batch_size",
          "warning:", "FLOPs", "finding")


def test_diagnose_keeps_layer_names_and_numbers_whole():
    from mptrain.diagnostics.numerics import Diagnosis, LayerNumbers

    layers = [LayerNumbers(layer=name, activation_max=123456.7, activation_overflow=0.123,
                           gradient_max=1.0, gradient_min_nonzero=1e-9, gradient_underflow=0.546,
                           gradient_underflow_scaled=1.0, gradient_overflow_scaled=0.0,
                           bfloat16_error=0.1234)
              for name in (LAYER, "dense_1")]
    diagnosis = Diagnosis(experiment="synthetic", steps=3, loss_scale=32768.0, layers=layers,
                          gradient_underflow=0.5, gradient_underflow_scaled=0.0,
                          gradient_overflow_scaled=0.0, scale_range=(1.0, 2.0),
                          overflowing_layers=[LAYER], verdicts={"mixed_float16": "54.6% underflow"},
                          recommendation="mixed_bfloat16")
    text = rendered(diagnose_view(diagnosis))
    for name in (LAYER, "dense_1"):
        leads_a_line(text, name)
    whole(text, "1.23e+05", "12.3%", "54.6%", "100.0%", "12.34%", "underflow", "× scale")


def test_memory_keeps_every_figure_whole():
    from mptrain.measure.memory import MemoryPlan, MemoryReport

    plan = {"batch_size": 4096, "parameters": 123_456_789, "weights_bytes": 1023 * 2**30,
            "weight_copies_bytes": 512 * 2**30, "gradients_bytes": 1023 * 2**30,
            "optimizer_bytes": 2046 * 2**30, "activations_bytes": 999 * 2**20,
            "total_bytes": 4200 * 2**30, "measured_peak_bytes": 4300 * 2**30,
            "largest_batch": 1_234_567_890, "largest_batch_basis": "measured"}
    report = MemoryReport(experiment="synthetic", batch_size=4096, parameters=123_456_789,
                          training_examples=4096, why="why", memory_bytes=80 * 2**30,
                          memory_of="GPU memory",
                          plans=[MemoryPlan(policy=p, **plan) for p in
                                 ("float32", "mixed_float16", "mixed_bfloat16")])
    text = rendered(memory_view(report))
    for name in ("float32", "mixed_float16", "mixed_bfloat16"):
        leads_a_line(text, name)
    whole(text, "1,234,567,890 (m)", "4200.0 GiB", "4300.0 GiB", "2046.0 GiB", "999.0 MiB",
          "123,456,789 parameters", "activations", "optimizer", "80.0 GiB")
    assert "80% of the 80.0 GiB of GPU memory" in " ".join(text.split())  # what it fits in



def test_the_summary_shows_every_test_metric_asked_for():
    summary = make_summary(test_metrics={"loss": 0.5, "accuracy": 0.9, "recall": 0.4321,
                                         "precision": 0.8765})
    text = rendered(summary_table(summary))
    whole(text, "recall 0.4321", "precision 0.8765")
    assert "standardised" not in text
    # a regression on standardised targets: Keras' MAE is theirs, the verdict's in dollars
    from mptrain.runs.summary import QualityFigure

    mae = QualityFigure(metric="mae", label="MAE", value=1117.8236, higher_is_better=False,
                        proportion=False)
    scaled = make_summary(test_loss=0.2061, test_metrics={"loss": 0.2061, "mae": 0.3075}, quality=mae)
    text = " ".join(rendered(summary_table(scaled)).split())
    assert "test on standardised targets: loss 0.2061 mae 0.3075" in text


def test_the_summarys_status_says_how_the_run_stopped_once():
    """'interrupted by SIGINT at the end of epoch 3', not 'interrupted, interrupted by ...';
    a reason that is no status word follows the status."""
    def status(**changes):
        text = " ".join(rendered(summary_table(make_summary(**changes))).split())
        return text.split("status ", 1)[1].split(" policy ")[0]

    assert status(status="interrupted", stopped_by="signal",
                  stop_reason="interrupted by SIGINT at the end of epoch 3") == \
        "interrupted by SIGINT at the end of epoch 3"
    assert status(stopped_by="max_steps", stop_reason="stopped after 8 steps (step limit 8)") == \
        "finished, stopped after 8 steps (step limit 8)"


def test_the_run_header_says_a_step_limit_beside_the_epochs():
    """`--steps 30` ends a 2-epoch run in its first epoch: the header said "2 epoch(s)" alone."""
    from mptrain.config import validate
    from mptrain.precision.policy import PolicyChoice
    from mptrain.report.tables import run_header
    from tests.helpers import tiny_raw

    choice = PolicyChoice(requested="float32", name="float32", reason="", jit_compile=False,
                          jit_reason="")
    limited = validate(tiny_raw("train.epochs=2", "train.max_steps=30"), "<test>")
    assert "2 epoch(s), 30 steps at most, no XLA" in run_header(limited, choice, None, []).plain
    assert "2 epoch(s), no XLA" in run_header(validate(tiny_raw("train.epochs=2"), "<test>"), choice,
                                              None, []).plain


def test_a_compare_with_an_xla_control_keeps_its_candidates_and_verdicts_whole():
    """mixed_float16+xla beside its float32+xla control: two spaces between six columns left
    the widest name a letter short (`mixed_float16+xl`, then `a`), so the columns close to one
    space before any word folds."""
    rows = [compare_row("float32", summary=make_summary(median=100.0), rounds=[100.0] * 5),
            compare_row("mixed_float16+xla", summary=make_summary(median=60.0, policy="mixed_float16"),
                        rounds=[60.0, 61.0, 59.0, 60.0, 62.0]),
            compare_row("float32+xla", summary=make_summary(median=80.0),
                        rounds=[80.0, 81.0, 79.0, 80.0, 82.0])]
    record = judge_compare(CompareRecord(experiment="synthetic", folder="/tmp/x", baseline=rows[0].label,
                                         baseline_policy="float32", variants=rows, turn_steps=10))
    verdict = record.variants[1].verdict
    assert verdict.control == "float32-xla-fit" and "precision" not in verdict.words()
    text = rendered(compare_tables(record))
    # (the precision's own effect is a note below the tables, not a third line in a verdict cell)
    assert "mixed_float16+xla fit: precision alone 1.33x float32-xla-fit's (faster)" in " ".join(text.split())
    results = text.split("\ndetails")[0]  # the widest table
    leads_a_line(results, "mixed_float16+xla")
    whole(results, "1.67x", "0.9000 (+0.00)", "faster, same accuracy")


def rows_of(table: str) -> list[list[str]]:
    """A rendered table's rows below its header rule, each the lines it takes."""
    body = table.split("─\n", 1)[1].splitlines()
    rows: list[list[str]] = []
    for line in body:
        if not line.strip():
            break
        if line[0] != " " and not line.startswith(("fit", "custom")):  # a row's first line
            rows.append([line])
        else:
            rows[-1].append(line)
    return rows


def test_a_verdict_takes_two_lines_at_most_and_the_notes_few():
    """A compare verdict saying all four things (its speed, its loss behind float32's, its
    quality worse, how it stopped) folds to two lines of an 80-column table, and the words
    below the tables are a few lines: their definitions are the glossary's (a verdict once
    ran to five lines, and the footnotes to fourteen)."""
    rows = [compare_row("float32", summary=make_summary(median=100.0), rounds=[100.0] * 5),
            compare_row("mixed_float16+xla", summary=make_summary(median=60.0, policy="mixed_float16"),
                        rounds=[60.0] * 5),
            compare_row("float32+xla", summary=make_summary(median=80.0), rounds=[80.0] * 5)]
    record = judge_compare(CompareRecord(experiment="synthetic", folder="/tmp/x", baseline=rows[0].label,
                                         baseline_policy="float32", variants=rows, turn_steps=10))
    worst = record.variants[1].verdict.model_copy(update=dict(
        stopped_early="cut by the budget after 3 rounds",
        training=Training(share=0.84, shortfall=0.2, allowance=0.1, behind=True),
        quality=QualityDelta(label="MAE", delta=1.0, relative_pct=12.3, higher_is_better=False,
                             worse=True)))
    record.variants[1] = record.variants[1].model_copy(update={"verdict": worst})
    text = rendered(compare_tables(record))
    results = text.split("\ndetails")[0]
    assert all(len(row) <= 2 for row in rows_of(results)), results
    whole(results, *worst.words().split())
    notes = text.split("waited for")[1].split("\n\n", 1)[1]  # below the last table
    assert len(notes.strip().splitlines()) <= 7, notes  # with a note for the row and the folder
    assert "docs/glossary.md" in " ".join(notes.split())


def test_a_plan_trial_says_how_it_stopped_in_a_word_and_its_precision_alone_below():
    """A trial the race stopped reads "(decided)" in its cell (its first word once kept the
    colon), and its speed against its control is a note below plan's table, as compare's is."""
    verdict = Verdict(speed=Speed(ratio=1.2, word="faster"), control="float32+xla",
                      stopped_early="decided: float32+xla leads after 3 rounds",
                      against_control=Speed(ratio=0.9, word="slower"))
    assert verdict.words() == "faster (decided)"
    trials = [Variant(label="float32", candidate=Candidate(name="float32", policy="float32"),
                      summary=make_summary(), verdict=Verdict(baseline=True)),
              Variant(label="mixed_bfloat16", summary=make_summary(policy="mixed_bfloat16"),
                      candidate=Candidate(name="mixed_bfloat16", policy="mixed_bfloat16"),
                      verdict=verdict)]
    plan = PlanRecord(experiment="x", folder="/tmp/plan", machine="m", measured_at="t", steps=30,
                      tolerance_pct=3.0, evaluate=False, budget_minutes=20.0, candidates=[],
                      trials=trials, winner="float32")
    said = " ".join(rendered(plan_tables(plan)).split())
    assert "mixed_bfloat16: precision alone 0.90x float32+xla's (slower)" in said, said


def test_the_glossary_defines_every_column_compare_and_plan_print():
    """The tables' footnotes send a reader to docs/glossary.md for every word: each column a
    compare or a plan table prints is there (a column added without its definition fails)."""
    from pathlib import Path

    from mptrain.report.fitted import Fitted

    glossary = " ".join(Path("docs/glossary.md").read_text().split())
    rows = [compare_row("float32", summary=make_summary(), rounds=[100.0] * 5),
            compare_row("float32", batch={"train.batch_size": 128}, label="float32@b128",
                        summary=make_summary(batch_size=128), rounds=[190.0] * 5)]
    compare = judge_compare(CompareRecord(experiment="x", folder="/tmp/x", baseline=rows[0].label,
                                          baseline_policy="float32", variants=rows, turn_steps=10))
    trial = Variant(label="float32", candidate=Candidate(name="float32", policy="float32"),
                    summary=make_summary(), verdict=Verdict(baseline=True))
    plan = PlanRecord(experiment="x", folder="/tmp/plan", machine="m", measured_at="t", steps=30,
                      tolerance_pct=3.0, evaluate=False, budget_minutes=20.0, candidates=[],
                      trials=[trial], winner="float32",
                      layers=[LayerTiming(layer="d", ms_16bit=1.0, ms_float32=1.0,
                                          spread_16bit=(1.0, 1.0), spread_float32=(1.0, 1.0))])
    tables = [table for group in (compare_tables(compare), plan_tables(plan))
              for table in group.renderables if isinstance(table, Fitted)]
    headers = {" ".join(head.replace("\n/", "/").split()) for table in tables for head in table.headers}
    assert {"ms/step", "speed-up", "verdict", "loss progress", "examples to target"} <= headers
    missing = sorted(head for head in headers if f"`{head}`" not in glossary)
    assert not missing, ", ".join(missing)
