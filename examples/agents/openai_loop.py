"""A plain OpenAI-SDK tool loop, played by campflow on every episode of an evaluation.

campflow starts this program once per episode with the episode in its environment (docs/agents.md):
OPENAI_BASE_URL and OPENAI_API_KEY point the SDK at campflow's recording proxy, CAMPFLOW_MCP_URL serves
the episode's tools over MCP and CAMPFLOW_TASK holds the task. Evaluate it with:

    campflow eval --agent "python examples/agents/openai_loop.py" --policy openai --base-url URL --model NAME
"""

import asyncio
import json
import os

from mcp import Client
from openai import AsyncOpenAI


def tool_schema(tool) -> dict:
    """An MCP tool as an OpenAI function tool."""
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description or "", "parameters": tool.input_schema},
    }


async def main() -> None:
    task = json.loads(os.environ["CAMPFLOW_TASK"])
    model = AsyncOpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY name this episode on the proxy
    async with Client(os.environ["CAMPFLOW_MCP_URL"], cache=None) as tools:
        schemas = [tool_schema(t) for t in (await tools.list_tools()).tools]
        messages = list(task["messages"])
        idle = 0  # replies in a row without a tool call
        for _ in range(50):
            completion = await model.chat.completions.create(
                model=os.environ["CAMPFLOW_MODEL"], messages=messages, tools=schemas
            )
            reply = completion.choices[0].message
            messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                idle += 1
                if idle == 3:  # the model is not using the tools: give up
                    return
                messages.append({"role": "user", "content": "Use the tools to finish the task."})
                continue
            idle = 0
            over, images = False, []
            for call in reply.tool_calls:
                result = await tools.call_tool(call.function.name, json.loads(call.function.arguments or "{}"))
                text = "\n".join(part.text for part in result.content if part.type == "text")
                images += [f"data:{p.mime_type};base64,{p.data}" for p in result.content if p.type == "image"]
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
                over = over or "Episode over" in text  # the final tool result says so: stop here
            if images:  # chat APIs take images in user messages only
                parts = [{"type": "image_url", "image_url": {"url": url}} for url in images]
                messages.append({"role": "user", "content": [{"type": "text", "text": "Tool images:"}, *parts]})
            if over:
                return


if __name__ == "__main__":
    asyncio.run(main())
