"""A real OpenAI-compatible chat-completions server on 127.0.0.1 that plays a scripted policy.

This is the test double at the one boundary campflow cannot reach here, a model endpoint: it speaks
the real protocol over HTTP, so the real ``openai`` client and our policy code run unchanged. It can
inject faults (HTTP 500/429, stalls past the client's timeout) and latency.

Scripts decide the assistant message for a request:

- :class:`OracleScript` recognizes the instance from the prompt, replays the tool calls so far on a
  fresh state and answers with the oracle's next action (so it solves every task);
- :class:`ReplyScript` returns canned messages in order (for synthesizer and malformed-output tests).

Run it as a process (for benchmarks): ``python -m campflow.testing.scripted_server --bootcamps calculator,maze
--n 500 --latency 0.05``, or with canned replies read from files (``--replies a.md b.md``, for
demonstrating ``campflow author``); it prints its base URL on the first line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import itertools
import json
import random
import sys
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Instance
from campflow.serialization import from_json, to_json

# the assistant message for a request (or an awaitable of it); optional "usage" and "finish_reason" keys
# are taken out of the message and answered as the response's own
Script = Callable[[dict[str, Any]], Any]


class OracleScript:
    """Answers like the oracle, for any of the given instances."""

    def __init__(self, instances: Iterable[Instance], *, as_text: bool = False) -> None:
        self.by_prompt: dict[str, Instance] = {}
        for inst in instances:
            user = registry.make(inst.bootcamp).prompt(inst)[-1]["content"]
            self.by_prompt[_key(user)] = inst
        self.as_text = as_text

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        messages = request["messages"]
        user = next(m["content"] for m in messages if m["role"] == "user")
        instance = self.by_prompt.get(_key(user))
        if instance is None:
            return {"role": "assistant", "content": "I do not recognize this task."}
        bootcamp = registry.make(instance.bootcamp)
        state = bootcamp.new_state(instance)
        for m in messages:
            for call in m.get("tool_calls") or []:
                try:
                    args = from_json(call["function"]["arguments"] or "{}")
                    bootcamp.apply(instance, state, Action(call["function"]["name"], args))
                except Exception:  # noqa: BLE001  (the scripted agent ignores calls the world refused)
                    pass
        action = bootcamp.oracle(instance, state)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return action_message(action, f"call_{turn}", as_text=self.as_text)


class ReplyScript:
    """Returns the given assistant messages in order, then repeats the last one."""

    def __init__(self, replies: Sequence[dict[str, Any] | str]) -> None:
        self.replies = [r if isinstance(r, dict) else {"role": "assistant", "content": r} for r in replies]
        self._next = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            i = next(self._next)
        return self.replies[min(i, len(self.replies) - 1)]


def action_message(action: Action, call_id: str, *, as_text: bool = False) -> dict[str, Any]:
    """An assistant message calling ``action``: a native tool call, or a Qwen-style ``<tool_call>`` block."""
    if as_text:
        body = json.dumps({"name": action.name, "arguments": dict(action.arguments)})
        return {"role": "assistant", "content": f"<tool_call>\n{body}\n</tool_call>"}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": action.name, "arguments": json.dumps(dict(action.arguments))},
            }
        ],
    }


def _dumps(value: Any) -> str:
    """Response JSON: orjson, or the standard library's ASCII escapes for text orjson refuses (lone
    surrogates), so broken model output reaches the client as a real server would send it."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value)


def _key(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True)


class ScriptedEndpoint:
    """The server. Use as a context manager (it runs on a background thread) or with :meth:`serve`.

    Args:
        script: decides each assistant message.
        latency: seconds every request waits before answering.
        fail_rate: share of requests answered with HTTP 500 or 429 (chosen at random).
        stall_rate: share of requests that wait ``stall_s`` before answering (past a client's timeout).
        seed: seeds the fault and stall draws.
        model: the served model's name.
        strict_models: answer HTTP 404 for a request naming neither ``model`` nor a loaded LoRA adapter
            (as vLLM does); off, any name is served.
    """

    def __init__(
        self,
        script: Script,
        *,
        latency: float = 0.0,
        fail_rate: float = 0.0,
        stall_rate: float = 0.0,
        stall_s: float = 30.0,
        seed: int = 0,
        model: str = "scripted",
        strict_models: bool = False,
    ) -> None:
        self.script, self.latency = script, latency
        self.strict_models = strict_models
        self.fail_rate, self.stall_rate, self.stall_s = fail_rate, stall_rate, stall_s
        self.model = model
        self.rng = random.Random(seed)
        self.requests = self.failures = self.stalls = 0
        self.last_headers: Mapping[str, str] = {}  # of the latest chat-completions request
        self.adapters: dict[str, str] = {}  # LoRA adapters loaded at runtime: name -> path
        self.lora_log: list[tuple[str, str, str | None]] = []  # ("load" | "unload", name, path)
        self.served_as: list[str] = []  # the model named by each chat-completions request
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    @property
    def url(self) -> str:
        """The base URL for an OpenAI client (``http://127.0.0.1:PORT/v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    async def _completions(self, request: web.Request) -> web.Response:
        self.requests += 1
        self.last_headers = request.headers
        body = from_json(await request.read())
        self.served_as.append(body.get("model"))
        if self.strict_models and body.get("model") not in (self.model, *self.adapters):  # as vLLM does
            return web.json_response(
                {"error": {"message": f"The model `{body.get('model')}` does not exist.", "type": "NotFoundError"}},
                status=404,
            )
        roll = self.rng.random()
        if roll < self.fail_rate:
            self.failures += 1
            status = self.rng.choice([500, 429])
            return web.json_response(
                {"error": {"message": "injected failure", "type": "server_error"}},
                status=status,
                headers={"retry-after-ms": "20"} if status == 429 else None,
            )
        if roll < self.fail_rate + self.stall_rate:
            self.stalls += 1
            await asyncio.sleep(self.stall_s)
        if self.latency:
            await asyncio.sleep(self.latency)
        message = self.script(body)
        if inspect.isawaitable(message):  # a script that generates (serve_model) awaits its model
            message = await message
        # a script may say what the reply cost and why it ended; otherwise both are estimated
        message = dict(message)
        usage, finish = message.pop("usage", None), message.pop("finish_reason", None)
        if usage is None:
            prompt_chars = sum(len(to_json(m.get("content") or "")) for m in body["messages"])
            completion_chars = len(to_json(message))
            usage = {
                "prompt_tokens": prompt_chars // 4,
                "completion_tokens": completion_chars // 4,
                "total_tokens": (prompt_chars + completion_chars) // 4,
            }
        finish = finish or ("tool_calls" if message.get("tool_calls") else "stop")
        return web.json_response(
            dumps=_dumps,
            data={
                "id": f"chatcmpl-{self.requests}",
                "object": "chat.completion",
                "created": 0,
                "model": self.model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": usage,
            },
        )

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response(
            {"object": "list", "data": [{"id": name, "object": "model"} for name in (self.model, *self.adapters)]}
        )

    async def _load_lora(self, request: web.Request) -> web.Response:
        """vLLM's runtime LoRA loading: the adapter is served under ``lora_name`` from then on."""
        body = from_json(await request.read())
        if body.get("lora_name") in self.adapters:
            return web.json_response(
                {
                    "error": {
                        "message": f"The lora adapter '{body['lora_name']}' has already been loaded.",
                        "type": "InvalidUserInput",
                    }
                },
                status=400,
            )
        self.adapters[body["lora_name"]] = body["lora_path"]
        self.lora_log.append(("load", body["lora_name"], body["lora_path"]))
        return web.Response(text=f"Success: LoRA adapter '{body['lora_name']}' added successfully.")

    async def _unload_lora(self, request: web.Request) -> web.Response:
        body = from_json(await request.read())
        if self.adapters.pop(body.get("lora_name"), None) is None:
            return web.json_response(
                {
                    "error": {
                        "message": f"The lora adapter '{body.get('lora_name')}' cannot be found.",
                        "type": "NotFoundError",
                    }
                },
                status=404,
            )
        self.lora_log.append(("unload", body["lora_name"], None))
        return web.Response(text=f"Success: LoRA adapter '{body['lora_name']}' removed successfully.")

    def _app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/load_lora_adapter", self._load_lora)
        app.router.add_post("/v1/unload_lora_adapter", self._unload_lora)
        return app

    async def start_async(self, port: int = 0) -> None:
        """Start serving on the running event loop."""
        self._runner = web.AppRunner(self._app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    def __enter__(self) -> ScriptedEndpoint:
        def run() -> None:
            self._loop = asyncio.new_event_loop()
            self._loop.run_until_complete(self.start_async())
            self._ready.set()
            self._loop.run_forever()
            self._loop.run_until_complete(self._runner.cleanup())  # type: ignore[union-attr]
            self._loop.close()

        self._thread = threading.Thread(target=run, name="scripted-endpoint", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the scripted endpoint did not start within 10 s")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)


def main(argv: list[str] | None = None) -> None:
    """Serve an oracle script for the eval split of some bootcamps (or canned replies) until killed."""
    from campflow.bootcamps.splits import eval_instances

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootcamps", default="calculator,maze")
    parser.add_argument("--n", type=int, default=200, help="eval instances per bootcamp to recognize")
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--text", action="store_true", help="answer with <tool_call> text, not native calls")
    parser.add_argument(
        "--replies",
        nargs="+",
        metavar="FILE",
        help="answer with these files' texts in order (the last repeated) instead of the oracle, "
        "e.g. the scripted modules of examples/author/",
    )
    args = parser.parse_args(argv)
    if args.replies:
        script: Script = ReplyScript([Path(f).read_text(encoding="utf-8") for f in args.replies])
    else:
        instances = [
            i for name in registry.parse_names(args.bootcamps) for i in eval_instances(registry.make(name), args.n)
        ]
        script = OracleScript(instances, as_text=args.text)
    endpoint = ScriptedEndpoint(script, latency=args.latency)

    async def serve() -> None:
        await endpoint.start_async(args.port)
        print(endpoint.url, flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
