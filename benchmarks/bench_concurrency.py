"""Concurrency: 1,000 episodes of about 4 turns against a local endpoint with 50 ms per call.

The endpoint runs in its own process (as a real model server would) and answers every request after
50 ms. With 64 episodes in flight, the ideal wall time is calls x latency / concurrency; the ratio of
the measured wall time to that ideal is the client's overhead (goal: <= 1.3). Each timed run includes
creating the client; importing the SDK, once per process, is timed apart. The same workload also runs
through the SDK's own ``post`` on its aiohttp client (campflow's client before issue 41), its httpx
client (``transport: httpx``), its ``chat.completions.create`` path with pydantic models, and, as a
reference for what any client costs, a bare aiohttp session with no retries, side by side. The endpoint
shares the machine's cores with the client: on a loaded machine every row's ratio grows, so compare
rows of one run.

Run: python benchmarks/bench_concurrency.py [--episodes 1000] [--latency 0.05] [--concurrency 64]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time

from campflow.agents.openai_policy import EndpointPolicy
from campflow.bootcamps import registry
from campflow.bootcamps.splits import eval_instances
from campflow.rollout.engine import EpisodeSpec, run_episodes


class SdkPostPolicy(EndpointPolicy):
    """campflow's client before issue 41: the same raw post, through the SDK's own ``post`` on its
    aiohttp client (retries and errors by the SDK), measured beside the client that replaced it."""

    def _make_client(self):  # type: ignore[override]
        return self._make_sdk_client()


class SdkModelsPolicy(EndpointPolicy):
    """The straightforward SDK path, for comparison: typed create() and pydantic response models."""

    async def respond(self, messages, tools, context):  # type: ignore[override]
        from campflow.agents.base import PolicyReply

        if self._client is None:
            self._client = self._make_client()
        resp = await self._client.chat.completions.create(
            model=self.model, messages=list(messages), tools=list(tools), **self.sampling
        )
        msg = resp.choices[0].message
        calls = [c.model_dump() for c in msg.tool_calls] if msg.tool_calls else None
        return PolicyReply(
            content=msg.content,
            tool_calls=calls,
            prompt_tokens=resp.usage.prompt_tokens,
            completion_tokens=resp.usage.completion_tokens,
        )


class BareAiohttpPolicy(EndpointPolicy):
    """No SDK at all: the same request body on one aiohttp session, no retries, no error mapping. Not
    something campflow ships; it shows how much of the client's CPU is the SDK's request layer."""

    async def respond(self, messages, tools, context):  # type: ignore[override]
        import aiohttp

        from campflow.agents.openai_policy import _reply_from_body
        from campflow.serialization import from_json, to_json_bytes

        if self._client is None:
            self._client = aiohttp.ClientSession(base_url=self.base_url.rstrip("/") + "/")
        body = to_json_bytes({"model": self.model, "messages": list(messages), "tools": list(tools), **self.sampling})
        async with self._client.post(
            "chat/completions", data=body, headers={"Content-Type": "application/json"}
        ) as response:
            return _reply_from_body(from_json(await response.read()), self._where())


def measure(policy: EndpointPolicy, specs: list[EpisodeSpec], concurrency: int) -> tuple[float, float, int, int]:
    """(wall seconds, client CPU seconds, calls, episodes solved)."""
    t0, c0 = time.perf_counter(), time.process_time()
    episodes = asyncio.run(run_episodes(specs, policy, concurrency=concurrency))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return wall, cpu, sum(e.turns for e in episodes), sum(e.success for e in episodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=1000)
    ap.add_argument("--latency", type=float, default=0.05)
    ap.add_argument("--concurrency", type=int, default=64)
    args = ap.parse_args()
    t0 = time.perf_counter()
    import openai  # noqa: F401  once per process (~0.6 s here), not per call: outside the timing

    import_s = time.perf_counter() - t0
    calc = registry.make("calculator")
    # level 3: three calculate calls and a submit, four turns an episode
    instances = eval_instances(calc, args.episodes, levels=[3])
    specs = [EpisodeSpec(calc, i) for i in instances]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "campflow.testing.scripted_server",
            "--bootcamps",
            "calculator",
            "--n",
            str(args.episodes * 4),
            "--latency",
            str(args.latency),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = server.stdout.readline().strip()
        print(
            f"endpoint {url}, {args.episodes} episodes, latency {args.latency * 1000:.0f} ms, "
            f"concurrency {args.concurrency}; the openai SDK was imported before timing in {import_s:.2f}s"
        )
        rows = []
        for label, policy in [
            ("campflow (raw post, aiohttp)", EndpointPolicy("scripted", base_url=url, transport="aiohttp")),
            ("before: SDK post, aiohttp", SdkPostPolicy("scripted", base_url=url, transport="aiohttp")),
            ("campflow (raw post, httpx)", EndpointPolicy("scripted", base_url=url, transport="httpx")),
            ("SDK create() + models, httpx", SdkModelsPolicy("scripted", base_url=url, transport="httpx")),
            ("no SDK: bare aiohttp (reference)", BareAiohttpPolicy("scripted", base_url=url)),
        ]:
            wall, cpu, calls, solved = measure(policy, specs, args.concurrency)
            ideal = calls * args.latency / args.concurrency
            rows.append((label, wall, ideal, calls, solved))
            print(
                f"  {label:32s} wall {wall:6.2f}s  ideal {ideal:5.2f}s  ratio {wall / ideal:4.2f}  "
                f"client CPU {cpu * 1000 / calls:.2f} ms/call  calls {calls}  solved {solved}/{len(specs)}",
                flush=True,
            )
        best = rows[0]
        print(f"RATIO concurrency: wall/ideal = {best[1] / best[2]:.2f} (goal <= 1.3)")
    finally:
        server.kill()


if __name__ == "__main__":
    main()
