"""Typed errors. Each message says what was wrong, what is accepted, and what to do.

The CLI turns any `NirvanaError` into a one-paragraph message and exit code 2; the app shows it
in an error box. Anything else is a bug.
"""

from __future__ import annotations


class NirvanaError(Exception):
    """Base class for every error the user can fix by changing their input."""


class InvalidInput(NirvanaError, ValueError):
    """An argument is outside what the method accepts (sparsity, gamma, align, N, T, ...)."""


class UnsupportedArchitecture(NirvanaError):
    """The model is not a decoder-only LM with an adapter in `nirvana.models.architectures`."""


class ModelNotFound(NirvanaError):
    """A model name is neither in the registry, nor a local directory, nor reachable on the hub."""


class DatasetNotFound(NirvanaError):
    """A dataset name or path could not be resolved to text."""


class PlanMismatch(NirvanaError):
    """A plan JSON is malformed, of another schema version, or made for another model."""


class CorruptCheckpoint(NirvanaError):
    """A pruned-model directory is missing a file or holds tensors of the wrong shape."""


class OutOfMemory(NirvanaError):
    """A step would not fit (or did not fit) in the device's memory."""


class PublishFailed(NirvanaError):
    """An upload to the Hugging Face Hub could not be made (offline, no network, token refused)."""


class TrainingDiverged(NirvanaError):
    """A fine-tuning loss or gradient became NaN/inf; the last good state was kept, nothing was saved."""


class Stopped(NirvanaError):
    """A long step was stopped by its caller before finishing; nothing of the unfinished part was saved."""
