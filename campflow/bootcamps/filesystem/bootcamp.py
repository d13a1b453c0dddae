"""filesystem: tidy an in-memory file tree by rules given in words (see tree.py for the tree)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    NoArgs,
    Observation,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.bootcamps.demonstration import exchanges
from campflow.bootcamps.filesystem.tree import (
    MAX_CONTENT_CHARS,
    ROOT,
    FilesystemParams,
    Tree,
    basename,
    generate_task,
    parent,
    resolve,
    shown,
)
from campflow.errors import ToolError


class PathArgs(ToolArgs):
    """Arguments of a tool that takes one path."""

    path: str = Field(description="a path under /workspace, absolute or relative to it")


class ListArgs(ToolArgs):
    """Arguments of ls."""

    path: str = Field(".", description="the folder to list, under /workspace (default: the root)")


class WriteArgs(ToolArgs):
    """Arguments of write."""

    path: str = Field(description="the file to create or overwrite; its folder must exist")
    content: str = Field(description="the new text of the file, at most 10,000 characters")


class MoveArgs(ToolArgs):
    """Arguments of mv."""

    source: str = Field(description="the file or folder to move")
    destination: str = Field(description="an existing folder to move it into, or its new path")


class RemoveArgs(ToolArgs):
    """Arguments of rm."""

    path: str = Field(description="the file or folder to delete")
    recursive: bool = Field(False, description="needed to delete a folder that is not empty")


@dataclass
class FilesystemState(State):
    """The episode's file tree."""

    tree: Tree = field(default_factory=Tree)


class Filesystem(Bootcamp[FilesystemParams, FilesystemState]):
    """Tidy up a small file tree following rules given in words.

    The files live under /workspace (paths may be absolute or relative to it; '..' is not allowed).
    Look around with `ls` and `cat`, then reorganize with `mkdir`, `mv`, `rm` and `write` until every
    rule holds, and call `done`. Moving a file into a folder keeps its name. Files the rules do not
    mention must stay where they are, unchanged, and nothing in system/ may ever be changed.

    Levels add rules (move by type into folders, delete by type, rename extensions, write a report),
    files in subfolders, pre-filled destinations and protected files that look like rule targets.
    Reward is the fraction of goal conditions met (one per file a rule touches, one for the report),
    halved if any other file was moved, changed or deleted, and 0 if a protected file was destroyed.
    Reasons: `protected_destroyed`, `not_moved`, `not_deleted`, `not_renamed`, `summary`, `collateral`.
    """

    name = "filesystem"
    version = "1"
    params_model = FilesystemParams
    state_model = FilesystemState
    levels = {
        1: FilesystemParams(level=1, moves=1, files_per_rule=3, bystanders=2, protected=1),
        2: FilesystemParams(level=2, moves=1, deletes=1, files_per_rule=3, bystanders=3, protected=2, prefilled=True),
        3: FilesystemParams(
            level=3,
            moves=2,
            deletes=1,
            renames=1,
            files_per_rule=3,
            summary=True,
            nested=True,
            bystanders=4,
            protected=3,
            traps=True,
        ),
        4: FilesystemParams(
            level=4,
            moves=3,
            deletes=2,
            renames=1,
            files_per_rule=4,
            summary=True,
            nested=True,
            bystanders=6,
            protected=4,
            traps=True,
            prefilled=True,
        ),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: FilesystemParams, rng: random.Random) -> dict[str, Any]:
        return generate_task(params, rng)

    def prompt(self, instance: Instance[FilesystemParams]) -> list[dict[str, Any]]:
        return self.chat(
            f"Tidy up the workspace at {ROOT}:\n{instance.data['goal']}\nCall done when everything is in order."
        )

    def new_state(self, instance: Instance[FilesystemParams]) -> FilesystemState:
        d = instance.data
        return FilesystemState(tree=Tree(files=dict(d["files"]), dirs=set(d["dirs"])))

    def max_turns(self, instance: Instance[FilesystemParams]) -> int:
        return 2 * len(_conditions(instance)) + 16

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def ls(self, instance: Instance, state: FilesystemState, args: ListArgs) -> Observation:
        """List a folder: subfolders (ending in '/') first, then files."""
        path = resolve(args.path)
        tree = state.tree
        if path in tree.files:
            return Observation(f"{shown(path)} is a file ({len(tree.files[path])} characters).")
        tree.require_dir(path)
        entries = tree.children(path)
        return Observation(f"{shown(path)}:\n" + ("\n".join(entries) if entries else "(empty)"))

    @tool
    def cat(self, instance: Instance, state: FilesystemState, args: PathArgs) -> Observation:
        """Show the text of a file."""
        path = resolve(args.path)
        if path not in state.tree.files:
            kind = "a folder" if state.tree.is_dir(path) else "missing"
            raise ToolError(f"{shown(path)!r} is {kind}; expected an existing file")
        return Observation(state.tree.files[path] or "(empty file)")

    @tool
    def write(self, instance: Instance, state: FilesystemState, args: WriteArgs) -> Observation:
        """Create a file or overwrite one with new text."""
        path = resolve(args.path)
        if len(args.content) > MAX_CONTENT_CHARS:
            raise ToolError(f"content is {len(args.content)} characters long; expected at most {MAX_CONTENT_CHARS}")
        existed = path in state.tree.files
        state.tree.write(path, args.content)
        return Observation(f"{'Overwrote' if existed else 'Created'} {shown(path)} ({len(args.content)} characters).")

    @tool
    def mkdir(self, instance: Instance, state: FilesystemState, args: PathArgs) -> Observation:
        """Create a folder, and any missing parent folders."""
        path = resolve(args.path)
        if path == "" or state.tree.is_dir(path):
            return Observation(f"{shown(path)} already exists.")
        state.tree.mkdir(path)
        return Observation(f"Created folder {shown(path)}.")

    @tool
    def mv(self, instance: Instance, state: FilesystemState, args: MoveArgs) -> Observation:
        """Move or rename a file or folder; into the destination when it is an existing folder."""
        src, dst = resolve(args.source, "source"), resolve(args.destination, "destination")
        target = state.tree.move(src, dst)
        return Observation(f"Moved {shown(src)} to {shown(target)}.")

    @tool
    def rm(self, instance: Instance, state: FilesystemState, args: RemoveArgs) -> Observation:
        """Delete a file, or a folder (with recursive=true if it is not empty)."""
        path = resolve(args.path)
        was_folder = state.tree.is_dir(path)
        count = state.tree.remove(path, args.recursive)
        return Observation(
            f"Deleted folder {shown(path)} and {count} file(s) in it." if was_folder else f"Deleted {shown(path)}."
        )

    @tool(final=True)
    def done(self, instance: Instance, state: FilesystemState, args: NoArgs) -> Observation:
        """Declare the workspace tidy. This ends the episode."""
        state.answer = "done"
        return Observation("Finished.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: FilesystemState, transcript: Any) -> Score:
        d, tree = instance.data, state.tree
        original = d["files"]
        names = {basename(f) for f in tree.files}
        unmet = [c[0] for c in _conditions(instance) if not _met(c, tree, original, names)]
        total = len(_conditions(instance))
        details: dict[str, Any] = {"met": total - len(unmet), "conditions": total}
        destroyed = [p for p in d["protected"] if tree.files.get(p) != original[p]]
        if destroyed:
            return Score(0.0, False, {**details, "reason": "protected_destroyed", "protected": destroyed})
        collateral = [b for b in d["bystanders"] if tree.files.get(b) != original[b]]
        reward = (total - len(unmet)) / total * (0.5 if collateral else 1.0)
        if unmet:
            reason = {"move": "not_moved", "rename": "not_renamed", "delete": "not_deleted"}.get(unmet[0], "summary")
            return Score(round(reward, 6), False, {**details, "reason": reason, "collateral": collateral})
        if collateral:
            return Score(round(reward, 6), False, {**details, "reason": "collateral", "collateral": collateral})
        return Score(1.0, True, details)

    # -- oracle ----------------------------------------------------------------------------------

    def oracle(self, instance: Instance, state: FilesystemState) -> Action:
        d, tree = instance.data, state.tree
        original = d["files"]
        names = {basename(f) for f in tree.files}
        by_content = {content: path for path, content in tree.files.items()}
        for cond in _conditions(instance):
            if _met(cond, tree, original, names):
                continue
            kind = cond[0]
            if kind in ("move", "rename"):
                src, dst = cond[1], cond[2]
                if not tree.is_dir(parent(dst)):
                    return Action("mkdir", {"path": parent(dst)})
                here = src if tree.files.get(src) == original[src] else by_content.get(original[src])
                if here is not None and here != dst and dst not in tree.files:
                    return Action("mv", {"source": here, "destination": dst})
            elif kind == "delete":
                here = next((f for f in sorted(tree.files) if basename(f) == basename(cond[1])), None)
                if here is not None:
                    return Action("rm", {"path": here})
            else:
                return Action("write", {"path": cond[1], "content": "\n".join(cond[2]) + "\n"})
        for b in d["bystanders"]:  # put back what a wrong step displaced
            here = by_content.get(original[b])
            if tree.files.get(b) != original[b] and here is not None and b not in tree.files:
                if not tree.is_dir(parent(b)):
                    return Action("mkdir", {"path": parent(b)})
                return Action("mv", {"source": here, "destination": b})
        return Action("done", {})

    def demonstrate(
        self, instance: Instance, state: FilesystemState, transcript: Sequence[Mapping[str, Any]]
    ) -> Action:
        """No file name is in the prompt: list every folder first (from the root down, through the
        subfolders each listing shows), then act as the oracle does, on names those listings showed."""
        listed, found = set(), [""]
        for name, args, result in exchanges(transcript):
            if name == "ls" and not result.startswith("Error"):
                here = resolve(args.get("path", "."))
                listed.add(here)
                found += [f"{here}/{e[:-1]}" if here else e[:-1] for e in result.splitlines()[1:] if e.endswith("/")]
        pending = next((f for f in found if f not in listed), None)
        if pending is not None:
            return Action("ls", {"path": pending or "."})
        return self.oracle(instance, state)

    def perturb(self, instance: Instance, state: FilesystemState, action: Action, rng: random.Random) -> Action:
        a = dict(action.arguments)
        tree = state.tree
        if action.name == "mv":
            wrong = [
                x
                for x in sorted(tree.dirs)
                if x not in (parent(a["destination"]), parent(a["source"]), a["destination"])
            ]
            return Action("mv", {"source": a["source"], "destination": rng.choice(wrong)}) if wrong else action
        if action.name == "rm":
            others = [b for b in instance.data["bystanders"] if b in tree.files]
            return Action("rm", {"path": rng.choice(others)}) if others else action
        if action.name == "write":
            lines = a["content"].splitlines()
            return Action("write", {"path": a["path"], "content": "\n".join(lines[:-1]) + "\n"})
        if action.name == "mkdir":
            return Action("mkdir", {"path": a["path"].capitalize()})
        return action

    def wrong_answer(self, instance: Instance, state: FilesystemState, rng: random.Random) -> Action:
        # Finishing early earns the partial credit already made, so a wrong answer from a state with
        # progress first destroys a protected file (the costliest plausible mistake), then finishes.
        d, tree = instance.data, state.tree
        intact = [p for p in d["protected"] if tree.files.get(p) == d["files"][p]]
        if len(intact) < len(d["protected"]):
            return Action("done", {})
        names = {basename(f) for f in tree.files}
        progress = any(_met(c, tree, d["files"], names) for c in _conditions(instance))
        if not progress and rng.random() < 0.5:
            return Action("done", {})
        return Action("rm", {"path": rng.choice(intact)})


def _conditions(instance: Instance) -> list[tuple[Any, ...]]:
    """The goal as checkable conditions: (kind, path...) per file a rule touches, plus the report."""
    d = instance.data
    out: list[tuple[Any, ...]] = []
    for r in d["rules"]:
        if r["kind"] == "delete":
            out += [("delete", p) for p in r["paths"]]
        else:
            out += [(r["kind"], src, dst) for src, dst in r["pairs"]]
    if d["summary"] is not None:
        out.append(("summary", d["summary"]["path"], d["summary"]["lines"]))
    return out


def _met(cond: tuple[Any, ...], tree: Tree, original: dict[str, str], names: set[str]) -> bool:
    kind = cond[0]
    if kind in ("move", "rename"):
        return tree.files.get(cond[2]) == original[cond[1]] and cond[1] not in tree.files
    if kind == "delete":
        return basename(cond[1]) not in names
    text = tree.files.get(cond[1])
    return text is not None and [x.strip() for x in text.splitlines() if x.strip()] == cond[2]
