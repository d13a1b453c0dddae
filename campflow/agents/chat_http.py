"""Chat-completions requests on one aiohttp session, retried as the ``openai`` SDK retries them.

With many episodes in flight, the client's CPU per call is what limits a rollout: the SDK's request
layer (options copied per attempt, an httpx request built and its URL parsed, headers merged and
normalized, then converted again for its aiohttp transport and back) cost ~1.4 ms of CPU a call here,
three times the bare aiohttp post it ends in (``benchmarks/bench_concurrency.py``). This module is
that post and the SDK's retry policy, nothing else:

- retried: connection failures and timeouts, and HTTP 408, 409, 429 and 5xx (a server's
  ``x-should-retry: true|false`` overrides the status), up to ``max_retries`` times;
- the wait before a retry: the server's ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP
  date) when it lies in (0, 60] s, otherwise 0.5 s doubling per retry up to 8 s, less 0-25% jitter;
  a ``Retry-After`` over 2 minutes is not waited for (the status is the answer);
- a refused connection (nothing listens there) is not retried, so a wrong URL fails at once;
- the timeout applies to connecting and to each read, as the SDK's aiohttp transport applies it, and
  HTTPS trusts the certificates the SDK's client trusts.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import os
import random
import time
from typing import Any

import aiohttp

from campflow.errors import PolicyError
from campflow.serialization import from_json

INITIAL_RETRY_DELAY, MAX_RETRY_DELAY, MAX_RETRY_AFTER = 0.5, 8.0, 60.0
MAX_HONOURED_RETRY_AFTER = 120.0  # past this a server's Retry-After ends the retries (as the SDK does)
_RETRIED_STATUSES = frozenset({408, 409, 429})


class EndpointStatusError(Exception):
    """The endpoint answered with an error status after the retries; ``message`` is its own words."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message = status, message


class ChatHTTP:
    """Posts JSON bodies to ``{base_url}/chat/completions`` on one aiohttp session (opened on first use,
    on the running loop; :meth:`close` closes it).

    Args:
        base_url: the API root, e.g. ``http://localhost:8000/v1``.
        api_key: sent as ``Authorization: Bearer``.
        timeout: seconds for connecting and for each read of one attempt.
        max_retries: retries after the first attempt before giving up.
        where: how errors name the endpoint, e.g. ``endpoint http://... (model m)``.
    """

    def __init__(self, base_url: str, api_key: str, timeout: float, max_retries: int, where: str) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.timeout, self.max_retries, self.where = timeout, max_retries, where
        self.headers = {
            "Authorization": f"Bearer {api_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        # read from the environment as the SDK reads them, for accounts that need them
        for env, header in (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project")):
            if os.environ.get(env):
                self.headers[header] = os.environ[env]
        self._timeout = aiohttp.ClientTimeout(total=None, connect=timeout, sock_connect=timeout, sock_read=timeout)
        self._session: aiohttp.ClientSession | None = None

    async def post(self, body: bytes) -> Any:
        """The JSON response to ``body`` (already serialized).

        Raises:
            EndpointStatusError: an error status that was not retried, or still there after the retries.
            PolicyError: no answer (refused, unreachable, timed out after every attempt) or one that is
                not JSON.
        """
        if self._session is None:
            ssl = _sdk_ssl_context() if self.url.startswith("https:") else True
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=100, ssl=ssl), timeout=self._timeout, headers=self.headers
            )
        for attempt in range(self.max_retries + 1):
            last = attempt == self.max_retries
            try:
                async with self._session.post(self.url, data=body) as response:
                    raw = await response.read()
                    status, headers = response.status, response.headers
            except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
                if last:
                    raise PolicyError(
                        f"{self.where} timed out after {self.max_retries + 1} attempt(s) of {self.timeout:g}s"
                    ) from exc
                await asyncio.sleep(_backoff(attempt))
                continue
            except (aiohttp.ClientError, OSError) as exc:
                if _refused(exc):
                    raise PolicyError(
                        f"cannot reach {self.where}: connection refused (nothing listens there)"
                    ) from None
                if last:
                    raise PolicyError(f"cannot reach {self.where}: {type(exc).__name__}: {exc}") from None
                await asyncio.sleep(_backoff(attempt))
                continue
            if status < 400:
                try:
                    return from_json(raw)
                except ValueError as exc:  # json's and orjson's decode errors, bad UTF-8
                    raise PolicyError(f"{self.where} returned a body that is not JSON: {exc}") from None
            retry_after = _retry_after(headers)
            if last or not _should_retry(status, headers, retry_after):
                raise EndpointStatusError(status, _error_message(status, raw))
            await asyncio.sleep(
                retry_after if retry_after is not None and 0 < retry_after <= MAX_RETRY_AFTER else _backoff(attempt)
            )
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def close(self) -> None:
        """Close the session (a later :meth:`post` opens a new one)."""
        if self._session is not None:
            await self._session.close()
            self._session = None


def _sdk_ssl_context() -> Any:
    """The certificates the SDK's own client trusts (its httpx's default context: certifi's bundle, or
    ``SSL_CERT_FILE``/``SSL_CERT_DIR``), so an endpoint the SDK could verify is verified here too."""
    try:  # httpx2 for openai>=3, httpx before
        from httpx2 import create_ssl_context
    except ImportError:  # pragma: no cover
        from httpx import create_ssl_context
    return create_ssl_context()


def _backoff(retries_taken: int) -> float:
    return min(INITIAL_RETRY_DELAY * 2.0 ** min(retries_taken, 1000), MAX_RETRY_DELAY) * (1 - 0.25 * random.random())


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asks to wait, from ``retry-after-ms`` or ``retry-after``; None if it does not say."""
    for header, divisor in (("retry-after-ms", 1000), ("retry-after", 1)):
        value = headers.get(header)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if math.isinf(delay):
            return MAX_HONOURED_RETRY_AFTER + 1
        return delay / divisor
    parsed = email.utils.parsedate_tz(headers.get("retry-after") or "")
    if parsed is None:
        return None
    try:
        return float(email.utils.mktime_tz(parsed) - time.time())
    except (OverflowError, ValueError, OSError):
        return None


def _should_retry(status: int, headers: Any, retry_after: float | None) -> bool:
    if retry_after is not None and math.isfinite(retry_after) and retry_after > MAX_HONOURED_RETRY_AFTER:
        return False
    explicit = headers.get("x-should-retry")
    if explicit in ("true", "false"):
        return explicit == "true"
    return status in _RETRIED_STATUSES or status >= 500


def _error_message(status: int, raw: bytes) -> str:
    """The endpoint's own message: ``error.message`` of a JSON body, else the body itself."""
    try:
        body: Any = from_json(raw)
    except ValueError:
        body = raw.decode("utf-8", "replace")
    err = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(err, str) and err:
        return err
    return f"Error code: {status} - {body}"


def _refused(exc: BaseException | None) -> bool:
    """Whether ``exc`` or anything it came from is a refused connection."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ConnectionRefusedError) or (
            isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError)
        ):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False
