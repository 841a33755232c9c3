#!/usr/bin/env python3
"""Optuna's SuccessiveHalvingPruner on a replay of trials' reports: the reference that
coordinator/asha.h must equal (tests/coordinator/asha_test.cc).

Input (argv[1], JSON): {"min_resource", "reduction_factor", "min_early_stopping_rate",
"maximize", "events": [[trial, step, value], ...]} in the order they happen; value null
means NaN. A trial starts (study.ask) at its first event, reports (trial.report, then
trial.should_prune) at each, is told PRUNED when pruned (its later events are skipped),
and COMPLETE with its last value after its last event. Output (stdout, JSON): for every
event, true (pruned there), false (goes on) or null (skipped: its trial had stopped).
"""

import json
import math
import sys

import optuna


def main() -> int:
    spec = json.load(open(sys.argv[1]))
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    pruner = optuna.pruners.SuccessiveHalvingPruner(
        min_resource=spec["min_resource"], reduction_factor=spec["reduction_factor"],
        min_early_stopping_rate=spec["min_early_stopping_rate"])
    study = optuna.create_study(direction="maximize" if spec["maximize"] else "minimize", pruner=pruner)
    events = spec["events"]
    last = {}
    for i, (t, _, _) in enumerate(events):
        last[t] = i
    live, stopped, out = {}, set(), []
    for i, (t, step, value) in enumerate(events):
        if t in stopped:
            out.append(None)
            continue
        if t not in live:
            live[t] = study.ask()
        trial = live[t]
        value = math.nan if value is None else value
        trial.report(value, step)
        pruned = trial.should_prune()
        out.append(pruned)
        if pruned:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            stopped.add(t)
        elif last[t] == i:
            study.tell(trial, 0.0 if math.isnan(value) else value)
            stopped.add(t)
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
