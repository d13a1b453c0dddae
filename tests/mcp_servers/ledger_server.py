"""A small stateful MCP server for campflow's MCP tests, written with the SDK's server side (MCPServer,
FastMCP's name in mcp 2.x): a ledger of named accounts, in memory, one per process.

Fault flags make it fail the ways a real server does, for the fault tests:
``--fail-start`` exits before speaking; ``--crash-on TOOL`` exits in the middle of that call;
``--hang-on TOOL`` never answers it; ``--garble-on TOOL`` writes a line that is not JSON-RPC instead
of the answer. ``--only-seed N`` makes the faults apply only to the episode with that seed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--fail-start", action="store_true")
parser.add_argument("--crash-on")
parser.add_argument("--hang-on")
parser.add_argument("--garble-on")
parser.add_argument("--only-seed", type=int)
parser.add_argument("--pid-file", help="append this process's pid here (tests look for survivors)")
opts = parser.parse_args()
faulty = opts.only_seed is None or opts.only_seed == opts.seed
if opts.pid_file:
    with open(opts.pid_file, "a") as f:
        f.write(f"{os.getpid()}\n")
if opts.fail_start and faulty:
    sys.exit("ledger: refusing to start (--fail-start)")

server = MCPServer("ledger", instructions="A ledger of named accounts.")
accounts: dict[str, float] = {}


def _fault(tool: str) -> None:
    if not faulty:
        return
    if opts.crash_on == tool:
        os._exit(3)
    if opts.hang_on == tool:
        time.sleep(3600)
    if opts.garble_on == tool:
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


@server.tool()
def balances() -> dict[str, float]:
    """Every account and its balance."""
    _fault("balances")
    return dict(accounts)


@server.tool()
def read_note(path: str) -> str:
    """Read a text file of the working folder."""
    _fault("read_note")
    return Path(path).read_text()


if __name__ == "__main__":
    server.run()
