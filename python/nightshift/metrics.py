"""A job's history as the coordinator keeps it (JobService.GetJobMetrics): per attempt,
every evaluation and the downsampled training curve; as tables and as a plot."""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Dict, List

from nightshift.v1 import jobs_pb2

if TYPE_CHECKING:
    import pandas


@dataclasses.dataclass(frozen=True)
class TrainPoint:
    """One kept point of the training curve."""

    attempt: int
    step: int
    epoch: int
    loss: float
    lr: float
    tokens_per_second: float


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """One evaluation on the validation split; `loss` is the training loss at its step (NaN: none kept)."""

    attempt: int
    epoch: int
    step: int
    loss: float
    metrics: Dict[str, float]  # val_loss, val_accuracy, ...


class Metrics:
    """The per-epoch history of one job: `evaluations` and `train` (both in attempt, then step order)."""

    def __init__(self, proto: jobs_pb2.JobMetrics) -> None:
        self.proto = proto
        self.job_id = proto.job_id
        self.train: List[TrainPoint] = []
        self.evaluations: List[Evaluation] = []
        for a in proto.attempts:
            points = [TrainPoint(a.attempt, t.step, t.epoch, t.loss, t.lr, t.tokens_per_second) for t in a.train]
            self.train += points
            for e in a.evals:
                before = [p.loss for p in points if p.step <= e.step]  # the CLI's LossAt
                self.evaluations.append(Evaluation(a.attempt, e.epoch, e.step, before[-1] if before else math.nan,
                                                   dict(sorted(e.metrics.items()))))

    @property
    def final(self) -> Dict[str, float]:
        """The last evaluation's metrics ({} before the first)."""
        return dict(self.evaluations[-1].metrics) if self.evaluations else {}

    def names(self) -> List[str]:
        """Every evaluation metric's name, sorted."""
        return sorted({k for e in self.evaluations for k in e.metrics})

    def to_dataframe(self) -> "pandas.DataFrame":
        """One row per evaluation: attempt, epoch, step, loss and each metric (needs pandas)."""
        import pandas

        names = self.names()
        rows = [[e.attempt, e.epoch, e.step, e.loss] + [e.metrics.get(n, math.nan) for n in names]
                for e in self.evaluations]
        return pandas.DataFrame(rows, columns=["attempt", "epoch", "step", "loss"] + names)

    def train_dataframe(self) -> "pandas.DataFrame":
        """One row per kept training point: attempt, step, epoch, loss, lr, tokens_per_second (needs pandas)."""
        import pandas

        return pandas.DataFrame([dataclasses.astuple(p) for p in self.train],
                                columns=[f.name for f in dataclasses.fields(TrainPoint)])

    def plot(self) -> Any:
        """A matplotlib Figure: training loss (and val_loss) by step, and the other validation
        metrics by step (needs matplotlib). In a notebook it shows inline; else fig.savefig()."""
        import matplotlib.pyplot as plt

        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
        left.plot([p.step for p in self.train], [p.loss for p in self.train], label="training loss")
        evals = [e for e in self.evaluations if "val_loss" in e.metrics]
        if evals:
            left.plot([e.step for e in evals], [e.metrics["val_loss"] for e in evals], "o-", label="val_loss")
        left.set_xlabel("step")
        left.set_title(f"job {self.job_id}: loss")
        left.legend()
        for name in [n for n in self.names() if n != "val_loss"]:
            points = [e for e in self.evaluations if name in e.metrics]
            right.plot([e.step for e in points], [e.metrics[name] for e in points], "o-", label=name)
        right.set_xlabel("step")
        right.set_title("validation")
        if self.names():
            right.legend()
        fig.tight_layout()
        return fig

    def __str__(self) -> str:
        if not self.proto.attempts:
            return "no metrics yet: the job has not reported a step"
        names = self.names()
        lines = [f"{'EPOCH':<6} {'STEP':<8} {'LOSS':<10}" + "".join(f" {n:<14}" for n in names)]
        for e in self.evaluations:
            values = [e.loss] + [e.metrics.get(n, math.nan) for n in names]
            cells = ["-" if math.isnan(v) else f"{v:.4f}" for v in values]
            lines.append(f"{e.epoch:<6} {e.step:<8} {cells[0]:<10}" + "".join(f" {c:<14}" for c in cells[1:]))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<nightshift.Metrics job {self.job_id}: {len(self.evaluations)} evaluations, {len(self.train)} points>"
