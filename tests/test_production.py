"""From production: the serving proxy in front of a scripted upstream, judging, filing, and watch's count."""

from __future__ import annotations

import asyncio
import importlib
import json
import re
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web
from typer.testing import CliRunner

from campflow.config import JudgeConfig, ProductionConfig, RedactionConfig, SynthesisConfig, WatchConfig
from campflow.flows.watch import ProductionCount, decide, production_failures
from campflow.proxy.filing import file_judged
from campflow.proxy.judging import judge_unjudged, read_scores
from campflow.proxy.production import CONVERSATION_HEADER, ProductionProxy
from campflow.storage.store import Store
from tests.production_records import record_judged

KEY = "sk-team-KEY-0123456789"
SECRET = re.compile(rb"secret-\d{6}")
SYSTEM = "SYSTEM-PROMPT-MARKER: you are the shop's refund agent"
BODY_503 = b'{"error":{"message":"overloaded: try later","type":"server_error","param":null,"code":"busy"}}'
BODY_400 = b'{"detail":"a body of the upstream\'s own shape"}'


class ScriptedUpstream:
    """An OpenAI-compatible upstream on 127.0.0.1 (chat completions, streamed or not, and a judge).

    The agent's reply names the conversation's nonce; a user turn with UPSTREAM-503 or UPSTREAM-400 gets
    that error as this server words it. The judge (``/judge/v1``) gives 0 to a conversation holding
    GIVE-UP and 1 to the others.
    """

    def __init__(self) -> None:
        self.keys: Counter[str] = Counter()
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.completions)
        app.router.add_get("/v1/models", self.models)
        app.router.add_post("/judge/v1/chat/completions", self.judge)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "shop-model", "object": "model"}]})

    async def completions(self, request: web.Request) -> web.StreamResponse:
        self.keys[request.headers.get("Authorization", "")] += 1
        body = await request.json()
        last = body["messages"][-1]
        text = str(last.get("content"))
        if "UPSTREAM-503" in text:
            return web.Response(status=503, body=BODY_503, content_type="application/json")
        if "UPSTREAM-400" in text:
            return web.Response(status=400, body=BODY_400, content_type="application/json")
        await asyncio.sleep(0.002)
        nonce = re.search(r"conv-\d+|solo-\d+", body["messages"][1]["content"]).group(0)  # type: ignore[union-attr]
        if last["role"] == "user":  # first turn: look the order up
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"call-{nonce}",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": json.dumps({"order": nonce})},
                    }
                ],
            }
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"Refund for {nonce} is on its way."}, "stop"
        usage = {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28}
        if not body.get("stream"):
            return web.json_response(
                {
                    "id": "cmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "shop-model",
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                }
            )
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        base = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "shop-model"}
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": ""}]
        if message.get("content"):
            words = message["content"].split(" ")
            deltas += [{"content": w + (" " if i < len(words) - 1 else "")} for i, w in enumerate(words)]
        for call in message.get("tool_calls") or []:
            args = call["function"]["arguments"]
            deltas.append(
                {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["function"]["name"], "arguments": args[:5]},
                        }
                    ]
                }
            )
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": args[5:]}}]})
        chunks = [{**base, "choices": [{"index": 0, "delta": d, "finish_reason": None}]} for d in deltas]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
        chunks.append({**base, "choices": [], "usage": usage})
        for chunk in chunks:
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def judge(self, request: web.Request) -> web.Response:
        prompt = (await request.json())["messages"][-1]["content"]
        sections = re.split(r"^## Conversation (\d+)$", prompt, flags=re.M)[1:]
        scores = []
        for number, text in zip(sections[::2], sections[1::2], strict=True):
            bad = "GIVE-UP" in text
            scores.append(
                {
                    "episode": int(number),
                    "score": 0.0 if bad else 1.0,
                    "label": "gave up" if bad else "ok",
                    "reason": "the user was left without a refund" if bad else "refund done",
                }
            )
        content = "Here is my verdict:\n```json\n" + json.dumps({"scores": scores}) + "\n```"
        return web.json_response(
            {
                "id": "judge-1",
                "object": "chat.completion",
                "created": 0,
                "model": "judge",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                ],
            }
        )

    async def aclose(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


def _production(upstream: ScriptedUpstream, spool: Path, **kw: Any) -> ProductionConfig:
    return ProductionConfig(
        upstream=f"http://127.0.0.1:{upstream.port}/v1",
        port=0,
        spool_dir=spool,
        redaction=RedactionConfig(drop_system_prompts=True, mask_patterns=[r"secret-\d{6}"]),
        judge=JudgeConfig(model="judge", base_url=f"http://127.0.0.1:{upstream.port}/judge/v1", group_size=6),
        **kw,
    )


async def _episode(base: openai.AsyncOpenAI, proxy: ProductionProxy, i: int) -> tuple[str, int]:
    """One conversation of the deployed agent: look the order up, answer; some end on an upstream 503."""
    cid = f"conv-{i:03d}"
    if i % 2:
        client, headers = base.with_options(base_url=proxy.conversation_url(cid)), {}
    else:
        client, headers = base, {CONVERSATION_HEADER: cid}
    stream = i % 4 == 0
    user = f"{cid}: please refund my order, my email is secret-{i:06d}" + (" GIVE-UP" if i % 5 == 0 else "")
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
    tools = [{"type": "function", "function": {"name": "lookup_order", "parameters": {"type": "object"}}}]
    calls = 0
    for _turn in range(2):
        calls += 1
        if stream:
            parts = await client.chat.completions.create(
                model="shop-model", messages=messages, tools=tools, stream=True, extra_headers=headers
            )
            content, tool_calls = "", {}
            async for chunk in parts:
                for choice in chunk.choices:
                    content += choice.delta.content or ""
                    for tc in choice.delta.tool_calls or []:
                        slot = tool_calls.setdefault(tc.index, {"id": tc.id, "name": "", "arguments": ""})
                        slot["name"] += (tc.function.name or "") if tc.function else ""
                        slot["arguments"] += (tc.function.arguments or "") if tc.function else ""
            calls_out = [
                {"id": t["id"], "type": "function", "function": {"name": t["name"], "arguments": t["arguments"]}}
                for t in tool_calls.values()
            ]
        else:
            reply = await client.chat.completions.create(
                model="shop-model", messages=messages, tools=tools, extra_headers=headers
            )
            message = reply.choices[0].message
            content = message.content or ""
            calls_out = [c.model_dump() for c in message.tool_calls or []]
        if not calls_out:
            assert cid in content
            break
        assert json.loads(calls_out[0]["function"]["arguments"]) == {"order": cid}
        messages += [
            {"role": "assistant", "content": None, "tool_calls": calls_out},
            {"role": "tool", "tool_call_id": calls_out[0]["id"], "content": f"order {cid}: 2 items"},
        ]
    if i % 25 == 0:  # the upstream fails: the agent hears the upstream's own error
        calls += 1
        messages.append({"role": "user", "content": "and the other order? UPSTREAM-503"})
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(model="shop-model", messages=messages, extra_headers=headers)
        assert failed.value.status_code == 503 and failed.value.response.content == BODY_503
    return cid, calls


async def test_two_hundred_concurrent_episodes_are_recorded_once_each_judged_and_filed(tmp_path: Path) -> None:
    upstream = ScriptedUpstream()
    await upstream.start()
    db = tmp_path / "ws" / "campflow.duckdb"
    Store(db)
    cfg = _production(upstream, tmp_path / "spool")
    proxy = ProductionProxy(cfg, db)
    await proxy.start()
    base = openai.AsyncOpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
    gate = asyncio.Semaphore(64)

    async def bounded(i: int) -> tuple[str, int]:
        async with gate:
            return await _episode(base, proxy, i)

    made = dict(await asyncio.gather(*(bounded(i) for i in range(200))))
    solo = [
        await base.chat.completions.create(
            model="shop-model",
            messages=[{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"solo-{n}"}],
        )
        for n in range(3)
    ]
    assert all(r.choices[0].message.tool_calls for r in solo)
    async with aiohttp.ClientSession() as http:
        bad = {"model": "shop-model", "messages": [{"role": "user", "content": "UPSTREAM-400"}]}
        async with http.post(f"{proxy.url}/chat/completions", json=bad, headers={CONVERSATION_HEADER: "odd"}) as r:
            assert (r.status, await r.read()) == (400, BODY_400)  # as the upstream gave it, byte for byte
        async with http.get(f"{proxy.url}/models") as r:
            assert (await r.json())["data"][0]["id"] == "shop-model"  # forwarded, not recorded
        for i in range(1, 200, 2):  # the application's feedback on half the episodes
            body = {"score": 0.0, "label": "Wrong refund"} if i % 10 == 1 else {"score": 1.0}
            async with http.post(f"{proxy.url.removesuffix('/v1')}/episodes/conv-{i:03d}/feedback", json=body) as r:
                assert r.status == 202
        async with http.post(f"{proxy.url.removesuffix('/v1')}/episodes/conv-001/feedback", json={"score": 2}) as r:
            assert r.status == 400 and (await r.json())["error"]["param"] == "score"
    await base.close()
    await proxy.aclose()
    assert upstream.keys == Counter({f"Bearer {KEY}": sum(made.values()) + len(solo), "": 1})  # the key passed on

    store = Store(db)
    calls = store.query("SELECT * FROM proxy_calls ORDER BY episode_id, seq")
    assert len({c["call_id"] for c in calls}) == len(calls) == sum(made.values()) + len(solo) + 1
    per_episode = Counter(c["episode_id"] for c in calls)
    assert {cid: per_episode[cid] for cid in made} == made  # every call once, under its own episode
    for c in calls:
        request = json.loads(c["request"])
        if c["episode_id"].startswith("conv-"):
            assert request["messages"][1]["content"].startswith(c["episode_id"] + ":")
            assert c["conversation"] == ("path" if int(c["episode_id"][5:]) % 2 else "header")
        assert request["messages"][0]["content"] != SYSTEM or request["messages"][0]["role"] != "system"
    alone = [c for c in calls if c["conversation"] == "none"]
    assert len(alone) == 3 and len({c["episode_id"] for c in alone}) == 3  # each its own episode
    failed = [c for c in calls if c["status"] != 200]
    assert sorted((c["status"], c["error_code"]) for c in failed) == [(400, None)] + [(503, "busy")] * 8
    streamed = next(c for c in calls if c["episode_id"] == "conv-004" and c["seq"] == 0)
    message = json.loads(streamed["response"])["choices"][0]["message"]
    assert streamed["stream"] and json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"order": "conv-004"}
    overhead = sorted(c["latency_s"] - c["upstream_latency_s"] for c in calls)
    print(
        f"\nproxy's own time per call over {len(overhead)} calls (64 in flight, spool fsync included): "
        f"median {statistics.median(overhead) * 1e3:.2f} ms, p95 {overhead[int(0.95 * len(overhead))] * 1e3:.2f} ms, "
        f"upstream median {statistics.median(c['upstream_latency_s'] for c in calls) * 1e3:.2f} ms"
    )
    data = db.read_bytes() + (
        db.with_suffix(".duckdb.wal").read_bytes() if db.with_suffix(".duckdb.wal").exists() else b""
    )
    assert b"conv-007" in data  # the search finds what is there
    assert not SECRET.search(data) and b"SYSTEM-PROMPT-MARKER" not in data and KEY.encode() not in data

    # the rest judged by the scripted judge, in groups; then filed as a production run and mined
    result = await asyncio.to_thread(judge_unjudged, store, cfg, SynthesisConfig(), llm=True)
    assert result.by_source == Counter({"judge": 100 + len(solo)}) and not result.judge_failures
    sources = {
        r["source"]: r["n"]
        for r in store.query("SELECT source, count(*) AS n FROM production_verdicts GROUP BY source")
    }
    assert sources == {"feedback": 100, "judge": 100 + len(solo)}
    run_id = result.filing.run_id
    expected = {f"conv-{i:03d}" for i in range(1, 200, 10)} | {f"conv-{i:03d}" for i in range(0, 200, 10)}
    failures = {
        r["episode_id"]: r["category"] for r in store.query("SELECT * FROM failures WHERE run_id = ?", [run_id])
    }
    assert set(failures) == expected
    assert set(failures.values()) == {"wrong_answer:wrong_refund", "wrong_answer:gave_up"}
    assert store.scalar("SELECT count(*) FROM failures WHERE run_id = ? AND cluster_id IS NULL", [run_id]) == 0
    judged = store.query("SELECT details->>'$.judgement_source' AS source FROM episodes WHERE episode_id = 'conv-010'")
    assert judged == [{"source": "judge"}]  # each filed episode names its judgement's source
    assert file_judged(store, cfg).run_id is None  # nothing judged twice

    from campflow.cli import COMMAND_MODULES, app

    for module in COMMAND_MODULES:  # as `campflow` does: every command registered
        importlib.import_module(f"campflow.cli.{module}")
    cli = CliRunner()
    shown = cli.invoke(app, ["failures", "--run", run_id, "--db", str(db)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "wrong_answer:gave_up" in shown.output, shown.output
    episode = cli.invoke(app, ["show", "conv-020", "--db", str(db)], env={"COLUMNS": "200"})
    assert episode.exit_code == 0 and "conv-020" in episode.output and "[redacted]" in episode.output, episode.output
    sql = cli.invoke(app, ["sql", "SELECT kind FROM runs", "--db", str(db)])
    assert sql.exit_code == 0 and "production" in sql.output
    await upstream.aclose()


def _hold_store(db: Path) -> subprocess.Popen:
    """Another process holding the store's write lock (as a long `campflow` command would)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"import duckdb, sys; c = duckdb.connect({str(db)!r}); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


async def test_a_store_that_cannot_be_written_blocks_no_reply_and_loses_no_call(tmp_path: Path) -> None:
    upstream = ScriptedUpstream()
    await upstream.start()
    db = tmp_path / "ws" / "campflow.duckdb"
    Store(db)
    cfg = _production(upstream, tmp_path / "spool")
    holder = _hold_store(db)
    try:
        proxy = ProductionProxy(cfg, db, lock_wait_s=0.05)
        await proxy.start()
        base = openai.AsyncOpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        made = dict(await asyncio.gather(*(_episode(base, proxy, i) for i in range(1, 21))))
        await base.close()
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{proxy.url.removesuffix('/v1')}/episodes/conv-003/feedback", json={"score": 0}) as r:
                assert r.status == 202
        await proxy.aclose()  # the last copy fails too: the calls stay in the spool
        assert proxy.writer.failures > 0 and proxy.writer.copied == 0
        spooled = (tmp_path / "spool" / "spool.jsonl").read_bytes()
        assert spooled.count(b"\n") == sum(made.values()) + 1
        assert b"conv-007" in spooled and not SECRET.search(spooled)  # redacted before the spool, too
    finally:
        holder.communicate("")
    # a new proxy (after a restart) copies what the old one left
    again = ProductionProxy(cfg, db)
    await again.start()
    for _ in range(100):
        if again.writer.copied:
            break
        await asyncio.sleep(0.05)
    await again.aclose()
    store = Store(db)
    per_episode = dict(Counter(r["episode_id"] for r in store.query("SELECT episode_id FROM proxy_calls")))
    assert per_episode == made
    assert store.query("SELECT episode_id, score FROM production_judgements") == [
        {"episode_id": "conv-003", "score": 0.0}
    ]
    # a crash between the store's commit and the offset's: the spool is copied again, each record once
    spool = tmp_path / "spool" / "spool.jsonl"
    spool.write_bytes(spooled)
    (tmp_path / "spool" / "spool.offset").write_text("0")
    third = ProductionProxy(cfg, db)
    await third.start()
    await third.aclose()
    assert store.scalar("SELECT count(*) FROM proxy_calls") == sum(made.values())
    assert store.scalar("SELECT count(*) FROM production_judgements") == 1
    await upstream.aclose()


def test_watch_counts_judged_production_failures_and_names_the_clusters_that_crossed(tmp_path: Path) -> None:
    cfg = WatchConfig(threshold=50, production_threshold=10, production_cluster_threshold=4)
    assert decide(0, ProductionCount(9, {"a": 3, "b": 3, "c": 3}), cfg) == (False, [])
    assert decide(0, ProductionCount(10, {"a": 3, "b": 3, "c": 4}), cfg) == (True, ["c"])
    assert decide(0, ProductionCount(7, {"a": 4, "b": 3}), cfg) == (True, ["a"])
    assert decide(49, ProductionCount(0), cfg) == (False, [])
    assert decide(50, ProductionCount(0), cfg) == (True, [])
    assert decide(0, ProductionCount(99, {"a": 99}), WatchConfig()) == (False, [])  # off unless configured

    # counted from the store: feedback filed into a production run, clustered, counted per cluster
    store = Store(tmp_path / "ws" / "campflow.duckdb")

    def record(n: int, label: str, score: float) -> None:
        said = {"role": "assistant", "content": "done"}
        record_judged(
            store, {f"{label}-{k}": ({"role": "user", "content": f"{label} {k}"}, said) for k in range(n)}, score, label
        )

    record(3, "wrong_refund", 0.0)
    record(5, "happy", 1.0)
    assert production_failures(store).total == 0  # judged, not filed yet
    file_judged(store, ProductionConfig(upstream="http://x/v1"))
    counted = production_failures(store)
    assert counted.total == 3 and sum(counted.by_cluster.values()) == 3
    record(2, "gave_up", 0.0)
    file_judged(store, ProductionConfig(upstream="http://x/v1"))
    counted = production_failures(store)
    assert counted.total == 5
    due, crossed = decide(0, counted, WatchConfig(production_cluster_threshold=3))
    assert due and [counted.labels[c] for c in crossed] and all(counted.by_cluster[c] >= 3 for c in crossed)
    assert not decide(0, counted, WatchConfig(production_threshold=6))[0]
    assert decide(0, counted, WatchConfig(production_threshold=5))[0]

    # the flow: judgements posted since are filed first, and the decision records what it counted
    from campflow.config import load_config
    from campflow.flows.watch import watch_flow

    record(1, "gave_up_again", 0.0)
    cfg = load_config(overrides={"workspace.path": str(tmp_path / "ws"), "watch.production_threshold": 100}, env={})
    decision = watch_flow(cfg)
    assert decision.production is not None and decision.production.total == 6
    assert not decision.due and decision.started is None
    assert store.query("SELECT production_failures, crossed_clusters, started_cycle_id FROM watch_decisions") == [
        {"production_failures": 6, "crossed_clusters": [], "started_cycle_id": None}
    ]


def test_the_judges_reply_must_score_every_conversation_once() -> None:
    from campflow.proxy.judging import JudgeError

    assert [
        s.score for s in read_scores('{"scores": [{"episode": 2, "score": 0}, {"episode": 1, "score": 1}]}', 2)
    ] == [1, 0]
    for text in ("no json here", '{"scores": [{"episode": 1, "score": 1}]}', '[{"episode": 1, "score": 3}]'):
        with pytest.raises(JudgeError):
            read_scores(text, 2)


LEDGER = str(Path(__file__).resolve().parent / "mcp_servers" / "ledger_server.py")


@pytest.mark.slow  # MCP servers started for the import's vetting and each proposal's checks (~1-3 s each)
def test_a_production_failure_cluster_becomes_a_validated_task_row_with_its_lineage(tmp_path: Path) -> None:
    """Judged production failures, clustered; a scripted synthesis endpoint proposes three ledger tasks."""
    from campflow.mcp.server import ServerSpec
    from campflow.mcp.tasks import parse_tasks
    from campflow.storage.imports import import_mcp_tasks
    from campflow.synthesis.from_production import synthesize_from_production
    from campflow.testing.scripted_server import ReplyScript, ScriptedEndpoint

    store = Store(tmp_path / "ws" / "campflow.duckdb")
    task = {
        "id": "open-one",
        "level": 1,
        "prompt": "Open account a with 5.",
        "reference": [{"tool": "open_account", "arguments": {"name": "a", "balance": 5}}],
        "checks": [{"call": {"tool": "balances"}, "path": ["a"], "equals": 5}],
    }
    import_mcp_tasks(
        "mcp-ledger",
        ServerSpec(command=[sys.executable, LEDGER, "--seed", "{seed}"]),
        parse_tasks([json.dumps(task)], "ledger.jsonl"),
        store,
    )
    asked = {"role": "user", "content": "Open an account for Bo with 12 and move 3 to it from savings."}
    said = {"role": "assistant", "content": "I opened the account for Bo with 12."}
    record_judged(store, {f"bank-{k}": (asked, said) for k in range(4)}, 0.0, "skipped the transfer")
    filed = file_judged(store, ProductionConfig(upstream="http://x/v1"))
    (cluster_id,) = [
        r["cluster_id"] for r in store.query("SELECT cluster_id FROM clusters WHERE run_id = ?", [filed.run_id])
    ]

    def row(rid: str, balance: int, expected: int) -> dict:
        opened = {"tool": "open_account", "arguments": {"name": "bo", "balance": balance}}
        check = {"call": {"tool": "balances"}, "path": ["bo"], "equals": expected}
        return {
            "level": 1,
            "row": {
                "id": rid,
                "level": 1,
                "prompt": f"Open bo with {balance}.",
                "reference": [opened],
                "checks": [check],
            },
        }

    vacuous = row("transfer-vacuous", 12, 12)
    vacuous["row"]["checks"] = [{"call": {"tool": "balances"}, "contains": {}}]
    proposals = [
        {"params": row("transfer-good", 12, 12), "rationale": "good"},
        {"params": row("transfer-wrong", 12, 9), "rationale": "reference fails its own check"},
        {"params": vacuous, "rationale": "doing nothing passes"},
    ]
    cfg = SynthesisConfig(
        synthesizer="llm", n_per_cluster=3, instances_per_variant=1, probes_per_variant=0, calibration_samples=0
    )
    with ScriptedEndpoint(ReplyScript([json.dumps({"proposals": proposals})])) as server:
        cfg.llm.model, cfg.llm.base_url, cfg.llm.max_requests = "scripted", server.url, 1
        summary = synthesize_from_production(store, cluster_id[:10], "mcp-ledger", cfg)
    assert summary.accepted == 1 and summary.proposed == 3
    verdicts = {
        r["rationale"]: (r["status"], r["reject_kind"], r["reject_reason"])
        for r in store.query("SELECT rationale, status, reject_kind, reject_reason FROM variants")
    }
    assert verdicts["good"][:2] == ("accepted", None)
    assert verdicts["reference fails its own check"][:2] == ("rejected", "unsolvable")
    assert "the oracle scored 0" in verdicts["reference fails its own check"][2]
    assert verdicts["doing nothing passes"][:2] == ("rejected", "unsolvable")
    assert "doing nothing passes every check" in verdicts["doing nothing passes"][2]
    lineage = store.query(
        "SELECT DISTINCT failed_episode_id, failure_run_id, category FROM variant_lineage "
        "WHERE synthesizer = 'llm-production' AND status = 'accepted' ORDER BY failed_episode_id"
    )
    assert [r["failed_episode_id"] for r in lineage] == [f"bank-{k}" for k in range(4)]
    assert {r["failure_run_id"] for r in lineage} == {filed.run_id}
    assert {r["category"] for r in lineage} == {"wrong_answer:skipped_the_transfer"}
    trained_on = store.scalar("SELECT count(*) FROM instances WHERE origin = 'synthesized' AND split = 'train'")
    assert trained_on == 1  # the accepted task's instance, ready for the next cycle's collection

    # the next cycle takes the accepted task up beside its own variants and collects on it; later ones do not
    from campflow.config import load_config
    from campflow.flows.collect import collection_instances
    from campflow.storage.variants import pending_production_ids
    from campflow.storage.workspace import Workspace

    (accepted,) = [r["variant_id"] for r in store.query("SELECT variant_id FROM variants WHERE status = 'accepted'")]
    assert pending_production_ids(store, ["calculator"], "c1") == []  # another bootcamp's cycle
    assert pending_production_ids(store, ["mcp-ledger"], "c1") == [accepted]
    ws_cfg = load_config(
        overrides={
            "workspace.path": str(tmp_path / "ws"),
            "training.bootcamps": ["mcp-ledger"],
            "training.collect_n": 2,
            "synthesis.share": 0.5,
        },
        env={},
    )
    instances, synthesized = collection_instances(
        ws_cfg, Workspace.from_config(ws_cfg), variant_ids=pending_production_ids(store, ["mcp-ledger"], "c1")
    )
    assert list(synthesized.values()) == [accepted] and len(instances) == 2
    from campflow.storage import cycles

    cycles.save_step(store, cycles.start(store, "c1"), "synthesize", variant_ids=[accepted])
    assert pending_production_ids(store, ["mcp-ledger"], "c1") == [accepted]  # c1's own, on its resume
    assert pending_production_ids(store, ["mcp-ledger"], "c2") == []  # taken up once
