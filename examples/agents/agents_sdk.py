"""An OpenAI Agents SDK agent with its own MCP client, played by campflow on every episode of an evaluation.

campflow starts this program once per episode (docs/agents.md): the SDK's model client points at the
recording proxy (OPENAI_BASE_URL, OPENAI_API_KEY), its MCP client at the episode's tools (CAMPFLOW_MCP_URL).
It runs offline: tracing, which would upload to OpenAI, is off. Evaluate it with:

    campflow eval --agent "python examples/agents/agents_sdk.py" --policy openai --base-url URL --model NAME
"""

import asyncio
import json
import os

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.agent import ToolsToFinalOutputResult
from agents.mcp import MCPServerStreamableHttp
from openai import AsyncOpenAI


def stop_when_the_episode_is_over(context, results) -> ToolsToFinalOutputResult:
    """The final tool result says the episode is over: end the run there instead of asking the model again."""
    for result in results:
        if "Episode over" in str(result.output):
            return ToolsToFinalOutputResult(is_final_output=True, final_output=str(result.output))
    return ToolsToFinalOutputResult(is_final_output=False)


def as_input(message: dict) -> dict:
    """A chat message of the task as an Agents SDK input item (images as input_image parts)."""
    content = message["content"]
    if isinstance(content, list):
        content = [
            {"type": "input_image", "image_url": part["image_url"]["url"], "detail": "auto"}
            if part["type"] == "image_url"
            else {"type": "input_text", "text": part["text"]}
            for part in content
        ]
    return {"role": message["role"], "content": content}


async def main() -> None:
    set_tracing_disabled(True)
    task = json.loads(os.environ["CAMPFLOW_TASK"])
    instructions = "\n".join(m["content"] for m in task["messages"] if m["role"] == "system")
    model = OpenAIChatCompletionsModel(model=os.environ["CAMPFLOW_MODEL"], openai_client=AsyncOpenAI())
    async with MCPServerStreamableHttp(params={"url": os.environ["CAMPFLOW_MCP_URL"]}, cache_tools_list=True) as tools:
        agent = Agent(
            name="campflow-agent",
            instructions=instructions,
            model=model,
            mcp_servers=[tools],
            tool_use_behavior=stop_when_the_episode_is_over,
        )
        conversation = [as_input(m) for m in task["messages"] if m["role"] != "system"]
        result = await Runner.run(agent, conversation, max_turns=50)
        print(result.final_output)


if __name__ == "__main__":
    asyncio.run(main())
