"""A small stateful MCP server for campflow's MCP tests: a ledger of named accounts, in memory, one per process.

Over stdio (how every MCP bootcamp of the tests starts it, a fresh process an episode: ~90 in one cycle) it
speaks MCP's stdio transport with the standard library: newline-delimited JSON-RPC, the initialize handshake,
``tools/list``, ``tools/call``. It answers as the SDK's server (MCPServer, FastMCP's name in mcp 2.x) answers
for the same functions: the same tool schemas (``TOOLS``, as the SDK writes them from the signatures; a test
compares them with the SDK's), the same result shapes (text content and ``structuredContent``) and the same
argument checks (pydantic's lax mode: a number may come as a numeric string, a name must be a string). It
starts in milliseconds, where importing the SDK costs ~1.4 s of CPU a process.

``--sdk`` serves stdio with the SDK itself (what ``benchmarks/bench_mcp.py`` measures: a real server's start).
``--http PORT`` serves streamable HTTP at ``http://127.0.0.1:PORT/mcp`` with the SDK, one ledger for every
session, with a ``reset`` tool that empties it (what a shared server offers an episode).

Fault flags make the episode of one seed fail the ways a real server does, for the fault tests:
``--fail-start-seed N`` exits before speaking; ``--crash-seed N`` exits in the middle of a ``deposit``;
``--hang-seed N`` never answers it; ``--garble-seed N`` writes a line that is not JSON-RPC instead of
the answer. ``--pid-file`` appends the server's pid (the tests look for survivors).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
for fault in ("fail-start", "crash", "hang", "garble"):
    parser.add_argument(f"--{fault}-seed", type=int)
parser.add_argument("--pid-file", help="append this process's pid here (tests look for survivors)")
parser.add_argument("--http", type=int, help="serve streamable HTTP on this port (with a reset tool)")
parser.add_argument("--sdk", action="store_true", help="serve stdio with the MCP SDK's server")
opts = parser.parse_args()
if opts.pid_file:
    with open(opts.pid_file, "a") as f:
        f.write(f"{os.getpid()}\n")
if opts.fail_start_seed == opts.seed:
    sys.exit("ledger: refusing to start (--fail-start-seed)")

if opts.http is not None or opts.sdk:
    from mcp.server.mcpserver.exceptions import ToolError
else:

    class ToolError(Exception):
        """A tool's refusal, its message shown to the model (the SDK's ToolError over HTTP)."""


accounts: dict[str, float] = {}


def _fault(tool: str) -> None:
    if tool != "deposit":
        return
    if opts.crash_seed == opts.seed:
        os._exit(3)
    if opts.hang_seed == opts.seed:
        time.sleep(3600)
    if opts.garble_seed == opts.seed:
        sys.stdout.write("this is not JSON-RPC\n")
        sys.stdout.flush()
        time.sleep(3600)


def open_account(name: str, balance: float = 0.0) -> str:
    """Open an account with a starting balance."""
    _fault("open_account")
    if name in accounts:
        raise ToolError(f"account {name!r} already exists")
    accounts[name] = balance
    return f"opened {name} with {balance:g}"


def deposit(name: str, amount: float) -> str:
    """Add an amount to an account."""
    _fault("deposit")
    if name not in accounts:
        raise ToolError(f"no account {name!r}")
    accounts[name] += amount
    return f"{name}: {accounts[name]:g}"


def balances() -> dict[str, float]:
    """Every account and its balance."""
    _fault("balances")
    return dict(accounts)


def read_note(path: str) -> str:
    """Read a text file of the working folder."""
    _fault("read_note")
    return Path(path).read_text()


def reset() -> str:
    """Empty the ledger."""
    accounts.clear()
    return "ledger emptied"


def _text_tool(name: str, description: str, properties: dict, required: list[str], read_only: bool = False) -> dict:
    """A tool whose function returns a string, described as the SDK describes it."""
    tool = {
        "description": description,
        "inputSchema": {"properties": properties, "required": required, "type": "object", "title": f"{name}Arguments"},
        "name": name,
        "outputSchema": {
            "properties": {"result": {"title": "Result", "type": "string"}},
            "required": ["result"],
            "type": "object",
            "title": f"{name}Output",
        },
    }
    return {"annotations": {"readOnlyHint": True}, **tool} if read_only else tool


TOOLS = [
    _text_tool(
        "open_account",
        open_account.__doc__,
        {
            "name": {"title": "Name", "type": "string"},
            "balance": {"default": 0.0, "title": "Balance", "type": "number"},
        },
        ["name"],
    ),
    _text_tool(
        "deposit",
        deposit.__doc__,
        {"name": {"title": "Name", "type": "string"}, "amount": {"title": "Amount", "type": "number"}},
        ["name", "amount"],
    ),
    {
        "annotations": {"readOnlyHint": True},
        "description": balances.__doc__,
        "inputSchema": {"properties": {}, "type": "object", "title": "balancesArguments"},
        "name": "balances",
        "outputSchema": {"type": "object", "additionalProperties": {"type": "number"}, "title": "balancesDictOutput"},
    },
    _text_tool("read_note", read_note.__doc__, {"path": {"title": "Path", "type": "string"}}, ["path"], read_only=True),
]
FUNCTIONS = {"open_account": open_account, "deposit": deposit, "balances": balances, "read_note": read_note}


def _argument(kind: str, value: object) -> object:
    """``value`` as pydantic's lax mode takes it for a ``str`` or ``float`` parameter; ValueError otherwise."""
    if kind == "string":
        if isinstance(value, str):
            return value
        raise ValueError("Input should be a valid string")
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise ValueError("Input should be a valid number, unable to parse string as a number") from None
    raise ValueError("Input should be a valid number")


def _result(text: str, structured: dict | None = None, error: bool = False) -> dict:
    result = {"content": [{"text": text, "type": "text"}], "isError": error}
    return result if structured is None else {**result, "structuredContent": structured}


def call(name: str, arguments: dict) -> dict:
    """``tools/call``: the tool's result, or its error as the SDK words it."""
    tool = next((t for t in TOOLS if t["name"] == name), None)
    if tool is None:
        return _result(f"Unknown tool: {name}", error=True)
    schema = tool["inputSchema"]
    kwargs, errors = {}, []
    for param, spec in schema["properties"].items():
        if param not in arguments:
            if param in schema.get("required", []):
                errors.append(f"{param}\n  Field required")
            continue
        try:
            kwargs[param] = _argument(spec["type"], arguments[param])
        except ValueError as exc:
            errors.append(f"{param}\n  {exc}")
    if errors:
        heading = f"{len(errors)} validation error{'s' if len(errors) > 1 else ''} for {schema['title']}"
        return _result(f"Error executing tool {name}: {heading}\n" + "\n".join(errors), error=True)
    try:
        value = FUNCTIONS[name](**kwargs)
    except ToolError as exc:
        return _result(f"Error executing tool {name}: {exc}", error=True)
    except Exception:  # a crash: the SDK names the tool, not the exception
        return _result(f"Error executing tool {name}", error=True)
    if isinstance(value, dict):
        return _result(json.dumps(value, indent=2), value)
    return _result(value, {"result": value})


def serve_stdio() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:  # a notification (notifications/initialized): no reply
            continue
        method, params = message.get("method"), message.get("params") or {}
        reply: dict = {"jsonrpc": "2.0", "id": message["id"]}
        if method == "initialize":
            reply["result"] = {
                "capabilities": {"tools": {"listChanged": False}},
                "instructions": "A ledger of named accounts.",
                "protocolVersion": params.get("protocolVersion"),
                "serverInfo": {"name": "ledger", "version": ""},
            }
        elif method == "tools/list":
            reply["result"] = {"tools": TOOLS}
        elif method == "tools/call":
            reply["result"] = call(params.get("name"), params.get("arguments") or {})
        elif method == "ping":
            reply["result"] = {}
        else:
            reply["error"] = {"code": -32601, "message": f"Method not found: {method}"}
        print(json.dumps(reply), flush=True)


def serve_sdk(port: int | None) -> None:
    """The same functions served by the SDK's MCPServer: streamable HTTP on ``port`` (with ``reset``), else stdio."""
    from mcp.server.mcpserver import MCPServer
    from mcp_types import ToolAnnotations

    server = MCPServer("ledger", instructions="A ledger of named accounts.")
    for tool in TOOLS:
        read_only = ToolAnnotations(read_only_hint=True) if "annotations" in tool else None
        server.tool(annotations=read_only)(FUNCTIONS[tool["name"]])
    if port is None:
        server.run()
    else:
        server.tool()(reset)
        server.run(transport="streamable-http", port=port)


if __name__ == "__main__":
    if opts.http is not None or opts.sdk:
        serve_sdk(opts.http)
    else:
        serve_stdio()
