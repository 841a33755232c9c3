"""Nightshift from Python: the client of the service, and its exported models in plain PyTorch.

    import nightshift
    client = nightshift.Client()      # the CLI's settings: NIGHTSHIFT_*, ~/.config/nightshift
    job = client.submit("job.yaml").wait()
    m = job.model()                   # or nightshift.load("model"), a folder from `nightshift job artifacts ID`
    print(m.predict(["some text"]))   # [{'label': ..., 'probabilities': {...}}]

The client (nightshift.Client, nightshift.Job; errors in nightshift.errors) is imported on
first use, so loading a model needs neither gRPC nor the generated stubs.

The loader is nightshift.model (re-exported here); the client nightshift.client.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

# Re-exported (the "X as X" form tells type checkers so).
from nightshift.model import (HfModel as HfModel, Model as Model, ModelFolderError as ModelFolderError,
                              collate as collate, load as load, plan_eval as plan_eval,
                              verify_folder as verify_folder)

__version__ = "0.2.0"

if TYPE_CHECKING:
    from nightshift.client import Client, Event, Job, RetryPolicy, Worker
    from nightshift.errors import (DownloadCorrupt, FailedPrecondition, NightshiftError, NotFound, PermissionDenied,
                                   SettingsError, SpecRefused, Unauthenticated, Unavailable)
    from nightshift.metrics import Metrics
    from nightshift.sweeps import Sweep

_LAZY = {"Client": "client", "Job": "client", "RetryPolicy": "client", "Event": "client", "Worker": "client",
         "Metrics": "metrics", "Sweep": "sweeps", "NightshiftError": "errors", "SpecRefused": "errors", "NotFound": "errors",
         "PermissionDenied": "errors", "Unauthenticated": "errors", "FailedPrecondition": "errors",
         "Unavailable": "errors", "SettingsError": "errors", "DownloadCorrupt": "errors"}


def __getattr__(name: str) -> Any:
    """The client's names, imported on first use (PEP 562)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"nightshift.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'nightshift' has no attribute {name!r}")


__all__ = ["load", "Model", "HfModel", "ModelFolderError", "verify_folder", "plan_eval", "collate"] + list(_LAZY)
