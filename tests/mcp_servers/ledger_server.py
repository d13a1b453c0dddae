"""A small stateful MCP server for campflow's MCP tests, written with the SDK's server side (MCPServer,
FastMCP's name in mcp 2.x): a ledger of named accounts, in memory, one per process.

Fault flags make the episode of one seed fail the ways a real server does, for the fault tests:
``--fail-start-seed N`` exits before speaking; ``--crash-seed N`` exits in the middle of a ``deposit``;
``--hang-seed N`` never answers it; ``--garble-seed N`` writes a line that is not JSON-RPC instead of
the answer. ``--pid-file`` appends the server's pid (the tests look for survivors).

``--http PORT`` serves streamable HTTP at ``http://127.0.0.1:PORT/mcp`` instead of stdio, one ledger for
every session, with a ``reset`` tool that empties it (what a shared server offers an episode).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
for fault in ("fail-start", "crash", "hang", "garble"):
    parser.add_argument(f"--{fault}-seed", type=int)
parser.add_argument("--pid-file", help="append this process's pid here (tests look for survivors)")
parser.add_argument("--http", type=int, help="serve streamable HTTP on this port (with a reset tool)")
opts = parser.parse_args()
if opts.pid_file:
    with open(opts.pid_file, "a") as f:
        f.write(f"{os.getpid()}\n")
if opts.fail_start_seed == opts.seed:
    sys.exit("ledger: refusing to start (--fail-start-seed)")

server = MCPServer("ledger", instructions="A ledger of named accounts.")
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


@server.tool()
def open_account(name: str, balance: float = 0.0) -> str:
    """Open an account with a starting balance."""
    _fault("open_account")
    if name in accounts:
        raise ToolError(f"account {name!r} already exists")
    accounts[name] = balance
    return f"opened {name} with {balance:g}"


@server.tool()
def deposit(name: str, amount: float) -> str:
    """Add an amount to an account."""
    _fault("deposit")
    if name not in accounts:
        raise ToolError(f"no account {name!r}")
    accounts[name] += amount
    return f"{name}: {accounts[name]:g}"


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def balances() -> dict[str, float]:
    """Every account and its balance."""
    _fault("balances")
    return dict(accounts)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def read_note(path: str) -> str:
    """Read a text file of the working folder."""
    _fault("read_note")
    return Path(path).read_text()


if opts.http is not None:

    @server.tool()
    def reset() -> str:
        """Empty the ledger."""
        accounts.clear()
        return "ledger emptied"


if __name__ == "__main__":
    if opts.http is not None:
        server.run(transport="streamable-http", port=opts.http)
    else:
        server.run()
