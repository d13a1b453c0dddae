"""A running OpenAI-compatible server (``serving.kind: endpoint``): what it serves, and LoRA adapters
loaded into it at runtime (vLLM's ``/v1/load_lora_adapter``, started with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``; SGLang's server answers the same requests)."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from campflow.errors import ServingError


def _request(base_url: str, route: str, body: dict[str, Any] | None = None, api_key: str | None = None) -> bytes:
    url = base_url.rstrip("/") + route
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        raise ServingError(
            f"{'POST' if body is not None else 'GET'} {url} answered HTTP {exc.code}: {detail}"
        ) from None
    except OSError as exc:
        raise ServingError(f"cannot reach {url} (serving.base_url): {exc}") from None


def served_models(base_url: str, api_key: str | None = None) -> list[str]:
    """The model names ``GET /v1/models`` lists."""
    try:
        return [m["id"] for m in json.loads(_request(base_url, "/models", api_key=api_key))["data"]]
    except (ValueError, KeyError, TypeError):
        raise ServingError(f"GET {base_url.rstrip('/')}/models did not answer an OpenAI model list") from None


def load_adapter(base_url: str, name: str, path: str, api_key: str | None = None) -> None:
    """Load the LoRA adapter at ``path`` into the server under ``name``."""
    _request(base_url, "/load_lora_adapter", {"lora_name": name, "lora_path": path}, api_key)


def unload_adapter(base_url: str, name: str, api_key: str | None = None) -> None:
    """Unload the adapter ``name`` again."""
    _request(base_url, "/unload_lora_adapter", {"lora_name": name}, api_key)


def api_key(env: str) -> str | None:
    """The key in environment variable ``env``, if set."""
    return os.environ.get(env) or None
