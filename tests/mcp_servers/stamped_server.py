"""A notes server for campflow's MCP tests that stamps every reply as real servers do: a fresh request id
(a uuid), the time, and the folder it runs in (the episode's own). Written with the SDK's server side
(MCPServer, FastMCP's name in mcp 2.x). Notes live in memory, one list per process.

``--tickets FILE`` is a counter kept in a file every server process shares: ``take_ticket`` numbers
tickets across servers, the state a server must not keep between episodes (the tests' unsteady task).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import uuid
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

parser = argparse.ArgumentParser()
parser.add_argument("--tickets", type=Path, required=True, help="a counter file shared by every server process")
opts = parser.parse_args()

server = MCPServer("stamped-notes", instructions="Notes in memory; every reply carries a request id and the time.")
notes: list[str] = []
taken: list[int] = []


def stamped(**reply: Any) -> dict[str, Any]:
    """``reply`` with what differs on every call: a request id, the time, the server's folder."""
    return {"request_id": str(uuid.uuid4()), "at": dt.datetime.now(dt.UTC).isoformat(), "folder": os.getcwd(), **reply}


@server.tool()
def add_note(text: str) -> dict[str, Any]:
    """Add a note."""
    notes.append(text)
    return stamped(added=text, count=len(notes))


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def list_notes() -> dict[str, Any]:
    """Every note, oldest first."""
    return stamped(notes=list(notes))


@server.tool()
def take_ticket() -> dict[str, Any]:
    """Take the next ticket number."""
    number = int(opts.tickets.read_text() or 0) + 1 if opts.tickets.exists() else 1
    opts.tickets.write_text(str(number))
    taken.append(number)
    return stamped(ticket=number)


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def my_tickets() -> dict[str, Any]:
    """The tickets this server has handed out."""
    return stamped(tickets=list(taken))


if __name__ == "__main__":
    server.run()
