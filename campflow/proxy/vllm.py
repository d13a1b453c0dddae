"""A vLLM server sampling from prompt ids the proxy rendered: token in, token out.

Asked through chat completions (:class:`~campflow.proxy.backends.EndpointBackend` with ``token_ids``),
vLLM renders each call's whole conversation itself, so a later call's prompt holds the earlier replies
tokenized again, and an episode's calls never merge into one sequence. With the checkpoint's tokenizer at
hand, the proxy does what it does for the in-process model (:class:`~campflow.proxy.local.LocalBackend`:
render once, continue an appending conversation from the previous call's ids, parse tool calls itself)
and asks vLLM's completions endpoint only to sample after those ids (``prompt`` as token ids,
``return_token_ids``, ``logprobs: 0`` for the sampled ids' logprobs).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from campflow.proxy.backends import EndpointBackend, ProxyError
from campflow.proxy.local import LocalBackend, _stop_ids


class VllmTokensBackend(LocalBackend):
    """A vLLM server for the checkpoint at ``path``, sent prompt ids, answering sampled ids and logprobs.

    Args:
        path: the checkpoint folder the server serves (its tokenizer and chat template are read here).
        base_url: the server's base URL (``http://host:port/v1``).
        served_name: the model name the server serves it under.
        max_new_tokens / temperature / seed: the policy's sampling (the agent's settings are not applied).
        api_key / timeout: as for :class:`~campflow.proxy.backends.EndpointBackend`.
        model_id / model_names: what the store records, and the names a request may use.
    """

    kind = "vllm"

    def __init__(
        self,
        path: str | Path,
        base_url: str,
        served_name: str,
        *,
        max_new_tokens: int = 256,
        temperature: float = 1.0,
        seed: int | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        model_id: str | None = None,
        model_names: Sequence[str] | None = None,
    ) -> None:
        super().__init__(
            path,
            max_new_tokens=max_new_tokens,
            temperature=temperature,
            seed=seed or 0,
            model_id=model_id or served_name,
            model_names=model_names or (served_name,),
            device="cpu",
            precision="fp32",
        )
        self.served_name, self.request_seed = served_name, seed
        self.upstream = EndpointBackend(base_url, served_name, api_key=api_key, timeout=timeout)

    @property
    def applied_sampling(self) -> dict[str, Any]:
        applied: dict[str, Any] = {"temperature": self.temperature, "max_tokens": self.max_new_tokens}
        if self.request_seed is not None:
            applied["seed"] = self.request_seed
        return applied

    def tokenizer(self) -> Any:
        from campflow.agents.templates import chat_format

        tokenizer = _tokenizer(self.path)
        if self._format is None:
            self._format = chat_format(tokenizer.chat_template)
        return tokenizer

    def context_limit(self) -> int:
        return _context_limit(self.path)

    def stop_ids(self) -> set[int]:
        return set(_stops(self.path))

    async def sample(self, prompt: list[int]) -> tuple[list[int], list[float]]:
        body: dict[str, Any] = {
            "model": self.served_name,
            "prompt": prompt,
            "max_tokens": self.max_new_tokens,
            "temperature": self.temperature,
            "logprobs": 0,
            "return_token_ids": True,
            "stop_token_ids": sorted(self.stop_ids()),
            "skip_special_tokens": False,
        }
        if self.request_seed is not None:
            body["seed"] = self.request_seed
        data = await self.upstream.post("/completions", body)
        choice = (data.get("choices") or [{}])[0]
        ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if not isinstance(ids, list) or not isinstance(logprobs, list) or len(ids) != len(logprobs):
            raise ProxyError(
                f"the vLLM server at {self.upstream.base_url} answered without token ids and a logprob per id "
                "(return_token_ids needs vLLM 0.10.2 or later)",
                status=502,
                kind="server_error",
                code="upstream_without_ids",
            )
        return [int(i) for i in ids], [float(x) for x in logprobs]

    async def aclose(self) -> None:
        await self.upstream.aclose()


@functools.lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


@functools.lru_cache(maxsize=4)
def _context_limit(path: str) -> int:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(path).get_text_config().max_position_embeddings


@functools.lru_cache(maxsize=4)
def _stops(path: str) -> frozenset[int]:
    from transformers import GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(path)
    except OSError:  # a folder without generation_config.json: the tokenizer's end of turn alone
        config = None
    return frozenset(_stop_ids(_tokenizer(path), config))
