"""The recording proxy's cost: calls through it vs the same in-process model called directly.

Both arms ask the same tiny local model (built here, random weights, greedy, a fixed number of new tokens) for
the same calculator prompts with their tools. The direct arm awaits the backend's ``generate`` (rendering,
tokenizing, batched generation, parsing the reply); the proxy arm sends the same requests through the
OpenAI SDK, from agents in a process of their own, to a :class:`~campflow.proxy.app.RecordingProxy` on
loopback, which adds the HTTP round trip, validation, and the call recorded before it is answered. The arms alternate in rounds, so
a machine that slows down slows both. Printed: time per call of each arm, RATIO (proxy / direct; goal
<= 1.1) and this process's CPU per call in each arm (the model's alone, then with the proxy: the difference is
the proxy's own CPU per call; the agents' client runs in its own process, as agent programs do).

Run: python benchmarks/bench_proxy.py [--calls 40] [--concurrency 1,8] [--rounds 3] [--new-tokens 48]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from campflow.bootcamps import registry
from campflow.proxy.app import RecordingProxy
from campflow.proxy.backends import ChatRequest
from campflow.proxy.local import LocalBackend
from campflow.storage.workspace import Workspace
from campflow.testing.tiny import untrained_tiny

# the tests' untrained tiny model: milliseconds a call, so the proxy's own cost shows
TINY = untrained_tiny()


def tasks(n: int) -> list[tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    bootcamp = registry.make("calculator")
    out = []
    for seed in range(n):
        instance = bootcamp.generate(1, seed)
        out.append((bootcamp.prompt(instance), bootcamp.tool_schemas(instance)))
    return out


async def direct(backend: LocalBackend, work: list, concurrency: int) -> None:
    sem = asyncio.Semaphore(concurrency)

    async def one(messages: list, tools: list) -> None:
        async with sem:
            body = {"model": backend.model_id, "messages": messages, "tools": tools}
            request = ChatRequest(backend.model_id, messages, tools, None, False, {}, body)
            await backend.generate(request, [])

    await asyncio.gather(*(one(m, t) for m, t in work))


# The agents: a process of their own (as agent programs are), so the main process's CPU is the proxy's and the
# model's alone. One OpenAI client per concurrent slot, each episode a copy of it with the episode's URL and key.
AGENTS = r"""
import asyncio, json, sys, time
import openai

job = json.loads(sys.stdin.readline())

async def main():
    sem = asyncio.Semaphore(job["concurrency"])
    base = openai.AsyncOpenAI(base_url="http://127.0.0.1/v1", api_key="-", max_retries=0)

    async def one(url, key, messages, tools):
        async with sem:
            client = base.with_options(base_url=url, api_key=key)
            await client.chat.completions.create(model=job["model"], messages=messages, tools=tools)

    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    await asyncio.gather(*(one(*w) for w in job["work"]))
    print(json.dumps({"wall": time.perf_counter() - t0}), flush=True)
    await base.close()

asyncio.run(main())
"""


async def proxied(proxy: RecordingProxy, model: str, work: list, concurrency: int, tag: str) -> tuple[float, float]:
    """Wall time the agents saw and this process's CPU time, for ``work`` through the proxy."""
    import json
    import sys

    jobs = []
    for i, (messages, tools) in enumerate(work):
        episode = f"{tag}-{i}"
        jobs.append([proxy.base_url(episode), proxy.open_episode(episode), messages, tools])
    agents = await asyncio.create_subprocess_exec(
        sys.executable, "-c", AGENTS, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
    )
    assert agents.stdin is not None and agents.stdout is not None
    agents.stdin.write(json.dumps({"model": model, "concurrency": concurrency, "work": jobs}).encode() + b"\n")
    await agents.stdin.drain()
    assert (await agents.stdout.readline()).strip() == b"ready"
    c0 = time.process_time()
    agents.stdin.write(b"go\n")
    await agents.stdin.drain()
    done = json.loads(await agents.stdout.readline())
    cpu = time.process_time() - c0
    await agents.wait()
    for i in range(len(work)):
        proxy.close_episode(f"{tag}-{i}")
    return done["wall"], cpu


async def main(args: argparse.Namespace, folder: Path) -> None:
    backend = LocalBackend(
        folder / "tiny", device="cpu", precision="fp32", model_id="tiny", max_new_tokens=args.new_tokens
    )
    store = Workspace(folder).store
    work = tasks(args.calls)
    print(
        f"tiny model, greedy, {args.new_tokens} new tokens a call; {args.calls} calls an arm a round, "
        f"{args.rounds} rounds; calls written to {store.path}"
    )
    async with RecordingProxy(backend, store) as proxy:
        await direct(backend, work[:4], 4)  # load the model, warm both paths
        await proxied(proxy, "tiny", work[:4], 4, "warm")
        for concurrency in args.concurrency:
            wall: dict[str, list[float]] = {"direct": [], "proxy": []}
            batches: dict[str, int] = {"direct": 0, "proxy": 0}
            cpu: dict[str, list[float]] = {"direct": [], "proxy": []}
            for r in range(args.rounds):
                for arm in ("direct", "proxy") if r % 2 == 0 else ("proxy", "direct"):
                    generated = backend._batches
                    if arm == "direct":
                        t0, c0 = time.perf_counter(), time.process_time()
                        await direct(backend, work, concurrency)
                        seconds, cpu_s = time.perf_counter() - t0, time.process_time() - c0
                    else:
                        seconds, cpu_s = await proxied(proxy, "tiny", work, concurrency, f"c{concurrency}-r{r}")
                    batches[arm] += backend._batches - generated
                    wall[arm].append(seconds / len(work))
                    cpu[arm].append(cpu_s / len(work))
            d, p = statistics.median(wall["direct"]), statistics.median(wall["proxy"])
            dc, pc = statistics.median(cpu["direct"]), statistics.median(cpu["proxy"])
            print(
                f"concurrency {concurrency:>2}: direct {d * 1e3:7.1f} ms/call, proxy {p * 1e3:7.1f} ms/call, "
                f"RATIO {p / d:.3f} (goal <= 1.1); CPU per call direct {dc * 1e3:.1f} ms, proxy {pc * 1e3:.1f} ms "
                f"(the proxy's own: {(pc - dc) * 1e3:.1f} ms); calls a generation batch: direct "
                f"{len(work) * args.rounds / batches['direct']:.1f}, proxy {len(work) * args.rounds / batches['proxy']:.1f}"
            )
    recorded = store.query("SELECT count(*) AS n FROM proxy_calls")[0]["n"]
    print(f"calls recorded: {recorded}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--new-tokens", type=int, default=48)
    from campflow.training.tinymodel import build_tiny_model

    folder = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    build_tiny_model(folder / "tiny", TINY, ["calculator"])  # runs its own event loop: before ours
    asyncio.run(main(parser.parse_args(), folder))
