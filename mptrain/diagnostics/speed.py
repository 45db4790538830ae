"""`mptrain lint`'s library function: the experiment set up as `run` would (nothing trains),
then the rules of `precision.lint` on its model. The rules live below the run so that `run`
can say the worst of them before it trains; setting up an experiment lives above it."""

from __future__ import annotations

from mptrain.precision.lint import LintReport, Target, alignment_units, lint


def lint_experiment(config, target: Target = "auto", verbose: bool = False) -> LintReport:
    """Set the experiment up as `run` would (without training) and lint its model."""
    from mptrain.model.flops import forward_profile
    from mptrain.runs.experiment import prepare

    prepared = prepare(config, verbose=verbose)
    profile = forward_profile(prepared.model, prepared.data.spec.shape)
    return LintReport(experiment=config.name, policy=prepared.choice.name,
                      device=prepared.machine.device_label,
                      alignment_for=alignment_units(prepared.machine, target),
                      flops_per_example=profile.training_flops, operations=profile.ops,
                      findings=lint(prepared, profile, target))
