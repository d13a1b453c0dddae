"""Reaching a checkpoint as the ``serving`` config says: a policy config for the rollout steps.

:func:`serve_checkpoint` is one checkpoint's lifetime (start, yield, always stop);
:class:`CheckpointServers` keeps one per checkpoint for a whole cycle, so the steps that evaluate the
same checkpoint (evaluate, calibration, probes) share its server, and closes them all at the end.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from pathlib import Path

from campflow.config import CampflowConfig, PolicyConfig
from campflow.errors import ConfigError, ServingError
from campflow.serving import running_server
from campflow.serving.launch import LaunchedServer

log = logging.getLogger(__name__)


def _checkpoint_id(path: Path) -> str:
    from campflow.agents.local import stamped_model_id  # light: json only; torch loads lazily

    return stamped_model_id(path) or path.name


def _adapter_base(path: Path) -> str | None:
    from campflow.agents.local import adapter_base

    return adapter_base(path)


def _openai_policy(cfg: CampflowConfig, name: str, base_url: str, api_key_env: str) -> PolicyConfig:
    policy = cfg.policy.model_copy(deep=True)
    policy.kind, policy.model, policy.base_url, policy.api_key_env = "openai", name, base_url, api_key_env
    return policy


class _Served:
    """One checkpoint being served: its policy config and how to check on it and end it."""

    def __init__(
        self,
        policy: PolicyConfig,
        server: LaunchedServer | None = None,
        unload: tuple[str, str] | None = None,
        api_key: str | None = None,
    ) -> None:
        self.policy, self.server, self.unload, self.api_key = policy, server, unload, api_key

    def check(self) -> None:
        if self.server is not None:
            self.server.check()

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        if self.unload is not None:
            try:
                running_server.unload_adapter(*self.unload, api_key=self.api_key)
            except ServingError as exc:  # the evaluation is done; a leftover adapter is worth a warning only
                log.warning("could not unload adapter %s: %s", self.unload[1], exc)


def _serve(cfg: CampflowConfig, path: Path) -> _Served:
    s = cfg.serving
    name = _checkpoint_id(path)
    base = _adapter_base(path)
    if s.kind == "launch":
        log_dir = s.log_dir or cfg.workspace.path / "serving-logs"
        server = LaunchedServer(
            s.command,
            str(path),
            name,
            Path(log_dir),
            port=s.port,
            startup_timeout=s.startup_timeout,
            base=base,
            adapter=str(path) if base else "",
        )
        server.start()
        return _Served(_openai_policy(cfg, name, server.base_url, cfg.policy.api_key_env), server)
    if not s.base_url:
        raise ConfigError("serving.base_url is required for serving.kind endpoint, e.g. http://localhost:8000/v1")
    key = running_server.api_key(s.api_key_env)
    listed = running_server.served_models(s.base_url, key)
    if base is not None and s.runtime_lora:
        running_server.load_adapter(s.base_url, name, str(path.resolve()), key)
        return _Served(_openai_policy(cfg, name, s.base_url, s.api_key_env), unload=(s.base_url, name), api_key=key)
    for candidate in (name, str(path), s.model):
        if candidate and candidate in listed:
            return _Served(_openai_policy(cfg, candidate, s.base_url, s.api_key_env))
    raise ServingError(
        f"the endpoint {s.base_url} serves {listed}, not checkpoint {name} ({path}); a running "
        "server takes adapters at runtime (serving.runtime_lora with a LoRA checkpoint), or set "
        "serving.model to the name it serves this checkpoint under, or use serving.kind launch"
    )


class CheckpointServers:
    """Policy configs for checkpoints, one server per checkpoint, all stopped by :meth:`close`.

    With ``serving.kind: inprocess`` nothing is started: the policy is the local one, as before.
    """

    def __init__(self, cfg: CampflowConfig) -> None:
        self.cfg = cfg
        self._served: dict[str, _Served] = {}

    def policy(self, path: str | Path) -> PolicyConfig:
        """The policy config that reaches the checkpoint at ``path`` (starting its server on first use)."""
        if self.cfg.serving.kind == "inprocess":
            policy = self.cfg.policy.model_copy(deep=True)
            policy.kind, policy.model = "local", str(path)
            return policy
        key = str(Path(path).resolve())
        if key not in self._served:
            self._served[key] = _serve(self.cfg, Path(path))
        served = self._served[key]
        served.check()
        return served.policy

    def config(self, path: str | Path) -> CampflowConfig:
        """``cfg`` with its policy replaced by :meth:`policy` of ``path``."""
        out = self.cfg.model_copy(deep=True)
        out.policy = self.policy(path)
        return out

    def check(self) -> None:
        """Raise :class:`ServingError` if any server has died (after a step, so the step is not marked done)."""
        for served in self._served.values():
            served.check()

    def close(self) -> None:
        """Stop every server started (and unload adapters), whatever happened."""
        while self._served:
            _, served = self._served.popitem()
            served.close()

    def __enter__(self) -> CheckpointServers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def serve_checkpoint(cfg: CampflowConfig, checkpoint: str | Path) -> Iterator[PolicyConfig]:
    """The policy config reaching ``checkpoint`` while the block runs; its server is stopped afterwards
    (on success, on error, on Ctrl-C), and checked before leaving so a server that died mid-run is an error."""
    with CheckpointServers(cfg) as servers:
        policy = servers.policy(checkpoint)
        yield policy
        servers.check()
