"""What the production proxy keeps out of its records: system prompts dropped, patterns masked.

Redaction runs on a record before it is written anywhere (the spool included), so a masked string never
touches the disk. The reply the agent gets is never redacted: only what campflow keeps of it.
"""

from __future__ import annotations

import re
from typing import Any

from campflow.config import RedactionConfig
from campflow.errors import ConfigError

DROPPED = "[system prompt dropped]"


class Redactor:
    """Applies a :class:`~campflow.config.RedactionConfig` to JSON values.

    Raises:
        ConfigError: a mask pattern is not a regular expression.
    """

    def __init__(self, cfg: RedactionConfig) -> None:
        self.drop_system_prompts, self.mask = cfg.drop_system_prompts, cfg.mask
        try:
            self.patterns = [re.compile(p) for p in cfg.mask_patterns]
        except re.error as exc:
            raise ConfigError(
                f"production.redaction.mask_patterns: {exc.pattern!r} is not a regular expression ({exc})"
            ) from None

    @property
    def active(self) -> bool:
        """Whether anything is redacted at all."""
        return self.drop_system_prompts or bool(self.patterns)

    def request(self, body: Any) -> Any:
        """A chat request as recorded: system messages without content (if so configured), strings masked."""
        if self.drop_system_prompts and isinstance(body, dict) and isinstance(body.get("messages"), list):
            body = {
                **body,
                "messages": [
                    {**m, "content": DROPPED} if isinstance(m, dict) and m.get("role") in ("system", "developer") else m
                    for m in body["messages"]
                ],
            }
        return self.value(body)

    def value(self, value: Any) -> Any:
        """``value`` with every pattern masked in every string, keys included."""
        if not self.patterns:
            return value
        if isinstance(value, str):
            for p in self.patterns:
                value = p.sub(self.mask, value)
            return value
        if isinstance(value, dict):
            return {self.value(k): self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value
