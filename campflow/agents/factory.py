"""Build a policy from its configuration."""

from __future__ import annotations

from campflow.agents.base import Policy
from campflow.config import PolicyConfig
from campflow.errors import ConfigError


def build_policy(cfg: PolicyConfig) -> Policy:
    """The policy ``cfg`` describes; endpoint and local policies need ``model``."""
    if cfg.kind == "oracle":
        from campflow.agents.oracle import OraclePolicy

        return OraclePolicy()
    if cfg.kind == "demonstrator":
        from campflow.agents.oracle import DemonstratorPolicy

        return DemonstratorPolicy()
    if cfg.kind == "noisy":
        from campflow.agents.oracle import NoisyOraclePolicy

        n = cfg.noise
        return NoisyOraclePolicy(n.p_wrong_move, n.p_malformed, n.p_wrong_answer, seed=n.seed)
    if not cfg.model:
        raise ConfigError(
            f"policy.model is required for policy kind {cfg.kind!r} "
            f"({'an endpoint model name' if cfg.kind == 'openai' else 'a local model path'})"
        )
    if cfg.kind == "openai":
        from campflow.agents.openai_policy import EndpointPolicy

        return EndpointPolicy(
            cfg.model,
            base_url=cfg.base_url,
            api_key_env=cfg.api_key_env,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            timeout=cfg.timeout,
            max_retries=cfg.max_retries,
            transport=cfg.transport,
            send_reasoning=cfg.send_reasoning,
        )
    from campflow.agents.local import LocalPolicy

    return LocalPolicy(
        cfg.model,
        batch_size=cfg.batch_size,
        max_new_tokens=cfg.max_tokens,
        temperature=cfg.temperature,
        seed=cfg.noise.seed,
        device=cfg.device,
        precision=cfg.precision,
        cpu_threads=cfg.cpu_threads,
    )


def policy_model_id(cfg: PolicyConfig) -> str:
    """The model id a policy built from ``cfg`` records, without building it."""
    if cfg.kind in ("oracle", "demonstrator", "noisy"):
        return build_policy(cfg).model_id
    if cfg.kind == "local":
        from campflow.agents.local import stamped_model_id

        return stamped_model_id(str(cfg.model)) or str(cfg.model)
    return str(cfg.model)
