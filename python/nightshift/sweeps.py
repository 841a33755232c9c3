"""A sweep as the coordinator runs it (JobService.SubmitSweep; docs/sweeps.md): its trials,
each an ordinary job, as a table, and its curves as a plot.

    sweep = client.sweep("sweep.yaml")        # a path, YAML text or a dict
    sweep.wait()
    sweep.trials()                            # a DataFrame: one row per trial
    sweep.plot()                              # metric by step per trial; metric by each param
    sweep.best().artifacts("best-model")      # the best trial's model
"""
from __future__ import annotations

import math
import os
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Union

import yaml

from nightshift.errors import SettingsError
from nightshift.v1 import jobs_pb2

if TYPE_CHECKING:
    import pandas

    from nightshift.client import Client, Job

SweepLike = Union[str, "os.PathLike[str]", Dict[str, Any]]


def sweep_yaml(sweep: SweepLike) -> tuple[str, str]:
    """The sweep file's text, with `base: FILE` (relative to the sweep file) replaced by that
    job spec as the CLI does, and the context an error names (the file, if any)."""
    if isinstance(sweep, dict):
        return yaml.safe_dump(sweep, sort_keys=False), ""
    text, path = str(sweep), ""
    if isinstance(sweep, os.PathLike) or ("\n" not in text and (
            os.path.isfile(text) or text.endswith((".yaml", ".yml", ".json")))):
        path = os.fspath(sweep)
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            raise SettingsError(f"cannot read sweep file {path}") from e
    # Nodes, not values: the base's scalars go as they are written (010, yes, 12:30), as
    # the CLI sends them, never through PyYAML's YAML 1.1 reading of them.
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as e:
        raise SettingsError(f"{path or 'sweep'}: not YAML: {e}") from e
    if isinstance(root, yaml.MappingNode):
        for i, (key, value) in enumerate(root.value):
            if not (isinstance(key, yaml.ScalarNode) and key.value == "base" and isinstance(value, yaml.ScalarNode)
                    and value.tag == "tag:yaml.org,2002:str"):
                continue
            base = os.path.join(os.path.dirname(path), value.value) if path else value.value
            try:
                with open(base, encoding="utf-8") as f:
                    node = yaml.compose(f.read())
            except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
                raise SettingsError(f"base: cannot read the job spec {base}: {e}") from e
            root.value[i] = (key, node)
            text = yaml.serialize(root)
    return text, path


class Sweep:
    """A sweep as last seen (`proto`: the nightshift.v1.Sweep)."""

    def __init__(self, client: "Client", proto: jobs_pb2.Sweep) -> None:
        self.client = client
        self.proto = proto

    @property
    def id(self) -> str:
        return self.proto.id

    @property
    def state(self) -> str:
        """RUNNING, SUCCEEDED, CANCELLED or FAILED."""
        return jobs_pb2.JobState.Name(self.proto.state)

    @property
    def reason(self) -> str:
        return self.proto.reason

    @property
    def metric(self) -> str:
        return self.proto.spec.metric

    def __repr__(self) -> str:
        return f"<nightshift.Sweep {self.id} {self.state}: {len(self.proto.trials)}/{self.proto.spec.max_trials} trials>"

    def refresh(self) -> "Sweep":
        self.proto = self.client._unary(self.client._jobs.GetSweep, jobs_pb2.GetSweepRequest(id=self.id))
        return self

    def wait(self, timeout: Optional[float] = None, poll: float = 1.0) -> "Sweep":
        """Polls until the sweep ends (TimeoutError after `timeout` seconds)."""
        end = None if timeout is None else time.monotonic() + timeout
        while self.refresh().state == "RUNNING":
            if end is not None and time.monotonic() > end:
                raise TimeoutError(f"sweep {self.id} still RUNNING after {timeout} s")
            time.sleep(poll)
        return self

    def cancel(self) -> "Sweep":
        """Cancels the sweep and its unfinished trials."""
        self.proto = self.client._unary(self.client._jobs.CancelSweep, jobs_pb2.CancelSweepRequest(id=self.id))
        return self

    def events(self) -> List[str]:
        """Every decision, in order: trials made, rungs passed, pauses, promotions, the end."""
        return [e.text for e in self.proto.events]

    def trials(self) -> "pandas.DataFrame":
        """One row per trial: index, job, state, rung, promotions, the metric and its step, and
        one column per searched field (needs pandas)."""
        import pandas

        fields = [p.field for p in self.proto.spec.params]
        rows = []
        for t in self.proto.trials:
            state = jobs_pb2.TrialState.Name(t.state).removeprefix("TRIAL_")
            rows.append([t.index, t.job_id, state, t.rung, t.promotions, t.value if t.has_value else math.nan,
                         t.step] + [_number(t.params.get(f, "")) for f in fields])
        return pandas.DataFrame(rows, columns=["trial", "job", "state", "rung", "promotions", self.metric, "step"]
                                + fields)

    def best(self) -> "Job":
        """The trial job with the best final metric (completed trials first)."""
        if not self.proto.best_job_id:
            raise SettingsError(f"sweep {self.id}: no trial has reported {self.metric} yet")
        return self.client.job(self.proto.best_job_id)

    def plot(self) -> Any:
        """A matplotlib Figure: the metric by step for every trial (its evaluations, across
        attempts), then the last value against each searched field (needs matplotlib)."""
        import matplotlib.pyplot as plt

        fields = [p.field for p in self.proto.spec.params]
        fig, axes = plt.subplots(1, 1 + len(fields), figsize=(5 * (1 + len(fields)), 3.6), squeeze=False)
        curves = axes[0][0]
        for t in self.proto.trials:
            history = self.client.job(t.job_id).metrics()
            points = [(e.step, e.metrics[self.metric]) for e in history.evaluations if self.metric in e.metrics]
            if points:
                curves.plot([s for s, _ in points], [v for _, v in points], "o-", markersize=3,
                            label=f"{t.index} ({jobs_pb2.TrialState.Name(t.state).removeprefix('TRIAL_').lower()})")
        curves.set_xlabel("step")
        curves.set_title(f"sweep {self.id}: {self.metric}")
        if self.proto.trials:
            curves.legend(fontsize="small")
        for ax, field in zip(axes[0][1:], fields):
            xs = [_number(t.params[field]) for t in self.proto.trials if t.has_value]
            ax.plot(xs, [t.value for t in self.proto.trials if t.has_value], "o")
            if self.proto.spec.params[fields.index(field)].kind == "log_uniform":
                ax.set_xscale("log")
            ax.set_xlabel(field)
            ax.set_title(f"{self.metric} (last) by {field}")
        fig.tight_layout()
        return fig


def _number(value: str) -> Any:
    """A param's value as a number where it is one."""
    try:
        return int(value)
    except ValueError:
        try:
            return float(value)
        except ValueError:
            return value
