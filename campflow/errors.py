"""Exception types shared across campflow.

Every error a user can cause derives from :class:`CampflowError`; the CLI prints its message as one
line and exits non-zero. Messages name the bad value and what was expected.
"""

from __future__ import annotations


class CampflowError(Exception):
    """Base class of every error campflow raises on purpose."""

    exit_code: int = 1


class ConfigError(CampflowError):
    """A configuration file or value is invalid."""

    exit_code = 2


class UnknownBootcampError(CampflowError, KeyError):
    """A bootcamp name is not registered."""

    exit_code = 2

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class InvalidParamsError(CampflowError, ValueError):
    """Bootcamp params do not validate against the bootcamp's params model."""

    exit_code = 2


class ContractError(CampflowError):
    """A bootcamp breaks the bootcamp contract (:mod:`campflow.bootcamps.contract`): an unsolved level, an
    unbounded wrong answer, nondeterministic generation."""


class ToolError(CampflowError):
    """A tool call the world refuses (a wall, a missing file, a bad expression).

    Raised by a bootcamp's tool methods *before* they change anything, so a rejected call leaves the
    world unchanged. The engine sends the message back to the model as the tool's observation.
    """


class ToolServerError(CampflowError):
    """The server behind a bootcamp's tools failed (would not start, crashed, hung, spoke malformed JSON-RPC).

    Not the model's doing: the engine ends that episode as ``infra_error`` and the run goes on.
    """


class PolicyError(CampflowError):
    """A policy could not produce a reply for infrastructure reasons (endpoint down, retries spent)."""


class ContextOverflowError(PolicyError):
    """The conversation no longer fits the model's context window."""


class EpisodeStopped(CampflowError):
    """Raised into an episode waiting for its next reply when the agent playing it is gone (a user's agent
    program exited, failed or ran out of time): the episode ends there.

    Args:
        reason: one line saying what happened (kept as the episode's error).
        termination: how the episode ends (a :class:`~campflow.rollout.episode.Termination`); None: as an
            episode that ended without a final tool, scored on its final state.
    """

    def __init__(self, reason: str, termination: object | None = None) -> None:
        super().__init__(reason)
        self.reason, self.termination = reason, termination


class StoreError(CampflowError):
    """The DuckDB store refused an operation."""


class QueryError(StoreError):
    """A user's SQL failed (syntax, unknown table, a write on the read-only connection)."""

    exit_code = 2


class StoreBusyError(StoreError):
    """Another process holds the store's write lock for longer than we were willing to wait."""

    exit_code = 3


class SplitLeakError(CampflowError):
    """An eval-split instance turned up where only training instances belong."""


class RunNotFoundError(CampflowError):
    """A run id names no run in the store (or a run with nothing of the kind asked for)."""

    exit_code = 2


class SynthesisError(CampflowError):
    """Failure mining or variant synthesis could not proceed (e.g. the synthesizer's LLM endpoint failed)."""


class ImportSourceError(CampflowError):
    """An external task source cannot become a bootcamp (unknown dataset, continuous actions, bad rows)."""

    exit_code = 2


class EnvServerError(CampflowError):
    """A bootcamp cannot be served as an OpenEnv environment (``campflow env serve``): a busy port, a host
    that cannot be listened on, a bootcamp that cannot start an episode."""

    exit_code = 2


class ClusterLostError(CampflowError):
    """The Ray cluster a run fans out to stopped answering (its head is gone); the episodes written so
    far are kept and the run completes with ``--run-id`` once a cluster is back."""


class ServingError(CampflowError):
    """A server for a checkpoint could not be started, answered wrongly, or died (``serving`` config)."""


class AuthoringError(CampflowError):
    """``campflow author`` cannot go on: a missing or unreadable task or examples file, an endpoint that
    cannot be reached, an LLM that never returned a module, a name already taken."""

    exit_code = 2


class ExportError(CampflowError):
    """Episodes cannot be exported or shown as asked: a missing optional extra (inspect-ai), a bad format
    or output folder."""

    exit_code = 2


class BootcampCheckError(CampflowError):
    """A bootcamp file failed ``campflow bootcamps check``'s checks, so it was not imported; ``report``
    holds every verdict."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report


class IntegrityError(CampflowError):
    """The adversarial pass (``integrity.hacker``) could not play its episodes: its endpoint failed or an
    episode ran out of time. A verifier it did not play is not called sound."""
