"""The in-memory file tree of the ``filesystem`` bootcamp and the generator of its tidying tasks.

Nothing here touches the host filesystem: a tree is a dict of file paths to contents plus a set of
folder paths, all relative to the virtual root ``/workspace`` (the root itself is ``""``).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, model_validator

from campflow.bootcamps.base import Params
from campflow.bootcamps.messages import clip
from campflow.errors import ToolError

ROOT = "/workspace"
MAX_PATH_CHARS = 256
MAX_DEPTH = 8
MAX_CONTENT_CHARS = 10_000
MAX_FILES = 500
_COMPONENT = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}")  # the whole name (fullmatch): "a\n" is not one

# Move groups: destination folder, extensions, name stems.
MOVE_GROUPS: list[tuple[str, tuple[str, ...], tuple[str, ...]]] = [
    (
        "photos",
        ("png", "gif", "jpg"),
        ("beach", "sunset", "family", "puppy", "garden", "skyline", "portrait", "snowman", "harbor", "picnic"),
    ),
    (
        "documents",
        ("pdf", "docx"),
        ("invoice", "contract", "resume", "letter", "manual", "receipt", "lease", "minutes", "agenda", "memo"),
    ),
    (
        "music",
        ("mp3", "wav", "flac"),
        ("song", "demo", "podcast", "chorus", "lullaby", "anthem", "ballad", "remix", "jingle", "overture"),
    ),
    (
        "code",
        ("py", "js"),
        ("main", "parser", "server", "client", "scraper", "builder", "loader", "router", "worker", "linter"),
    ),
    (
        "sheets",
        ("csv", "xlsx"),
        ("sales", "inventory", "grades", "expenses", "contacts", "survey", "payroll", "budget", "roster", "ledger"),
    ),
]
DELETE_EXTS: dict[str, tuple[str, ...]] = {
    "tmp": ("cache", "session", "swap", "scratch", "upload"),
    "bak": ("settings", "profile", "database", "notebook", "archive"),
    "log": ("install", "crash", "debug", "access", "update"),
    "part": ("download", "video", "movie", "torrent", "stream"),
}
RENAMES: list[tuple[str, str, tuple[str, ...]]] = [
    ("jpeg", "jpg", ("scan", "selfie", "poster", "diagram", "sketch")),
    ("htm", "html", ("index", "about", "contact", "pricing", "faq")),
    ("markdown", "md", ("readme", "changelog", "guide", "roadmap", "notes")),
    ("yml", "yaml", ("config", "compose", "pipeline", "deploy", "schema")),
    ("text", "txt", ("draft", "outline", "poem", "quotes", "recipe")),
]
BYSTANDERS = (
    "todo",
    "ideas",
    "journal",
    "shopping",
    "birthdays",
    "passwords-hint",
    "reading",
    "goals",
    "packing",
    "wishlist",
    "chores",
    "movies",
)
BYSTANDER_EXTS = ("txt", "md", "json", "ini", "rtf")
PROTECTED = ("config", "boot", "kernel", "drivers", "firmware", "registry", "license", "hosts")
NESTED = ("old", "2023", "misc")
WORDS = ("alpha", "river", "maple", "orbit", "quartz", "ember", "lumen", "cobalt", "willow", "nimbus")


class FilesystemParams(Params):
    """Knobs of a file-tidying task."""

    moves: int = Field(1, ge=0, le=len(MOVE_GROUPS), description="rules that move files of some types into a folder")
    deletes: int = Field(0, ge=0, le=len(DELETE_EXTS), description="rules that delete files of a type")
    # one rename pair (jpeg -> jpg) clashes with the photos rule, so one fewer than there are is safe
    renames: int = Field(0, ge=0, le=len(RENAMES) - 1, description="rules that change one extension into another")
    files_per_rule: int = Field(3, ge=1, le=6, description="files each rule applies to")
    summary: bool = Field(False, description="also write report.txt listing what was done")
    nested: bool = Field(False, description="rule files also hide in subfolders of inbox/")
    bystanders: int = Field(2, ge=0, le=12, description="files no rule touches, which must stay as they are")
    protected: int = Field(1, ge=1, le=8, description="files in system/ that must never change")
    traps: bool = Field(False, description="protected files share extensions with the rules")
    prefilled: bool = Field(False, description="destination folders already exist and hold a file")

    @model_validator(mode="after")
    def _some_rule(self) -> FilesystemParams:
        if self.moves + self.deletes + self.renames == 0:
            raise ValueError("moves + deletes + renames must be at least 1; a task needs a rule")
        return self


def resolve(raw: str, what: str = "path") -> str:
    """A path as the tree stores it (relative to the root), or ToolError saying what is wrong.

    Accepts ``/workspace/a/b``, ``a/b`` and ``./a/b``; refuses ``..``, other absolute paths, odd
    characters and paths that are too long or too deep.
    """
    text = raw.strip()
    shown = clip(text, 60)
    if len(text) > MAX_PATH_CHARS:
        raise ToolError(f"{what} {shown!r} is {len(text)} characters long; expected at most {MAX_PATH_CHARS}")
    if text == ROOT or text.startswith(ROOT + "/"):
        text = text[len(ROOT) :]
    elif text.startswith("/") or text.startswith("~"):
        raise ToolError(f"{what} {shown!r} is outside the workspace; expected a path under {ROOT}/ or relative to it")
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ToolError(f"{what} {shown!r} contains '..'; expected a path inside {ROOT} without '..'")
    if len(parts) > MAX_DEPTH:
        raise ToolError(f"{what} {shown!r} is {len(parts)} folders deep; expected at most {MAX_DEPTH}")
    for p in parts:
        if not _COMPONENT.fullmatch(p):
            raise ToolError(
                f"{what} {shown!r} has a bad name {p[:40]!r}; expected letters, digits and . _ - "
                "(at most 64 characters, not starting with '.')"
            )
    return "/".join(parts)


def parent(path: str) -> str:
    """The folder that holds ``path`` (``""`` is the root)."""
    return path.rpartition("/")[0]


def basename(path: str) -> str:
    """The last component of ``path``."""
    return path.rpartition("/")[2]


def shown(path: str) -> str:
    """A stored path as the agent sees it."""
    return f"{ROOT}/{path}" if path else ROOT


def _brief(path: str) -> str:
    text = shown(path)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass
class Tree:
    """Files (path -> content) and folders of one episode; every method validates before it mutates."""

    files: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)

    def is_dir(self, path: str) -> bool:
        """Whether ``path`` is a folder (the root always is)."""
        return path == "" or path in self.dirs

    def require_dir(self, path: str, role: str = "folder") -> None:
        """ToolError unless ``path`` is an existing folder."""
        if not self.is_dir(path):
            kind = "a file" if path in self.files else "missing"
            raise ToolError(f"{role} {shown(path)!r} is {kind}; expected an existing folder")

    def children(self, folder: str) -> list[str]:
        """Direct children of ``folder``, folders first, each sorted."""
        subdirs = sorted(d for d in self.dirs if parent(d) == folder)
        files = sorted(f for f in self.files if parent(f) == folder)
        return [basename(d) + "/" for d in subdirs] + [basename(f) for f in files]

    def under(self, folder: str) -> tuple[list[str], list[str]]:
        """Folders and files strictly below ``folder``."""
        prefix = folder + "/"
        return ([d for d in self.dirs if d.startswith(prefix)], [f for f in self.files if f.startswith(prefix)])

    def mkdir(self, path: str) -> list[str]:
        """Create ``path`` and missing parents; returns the folders created."""
        parts = path.split("/")
        ancestors = ["/".join(parts[: i + 1]) for i in range(len(parts))]
        clash = next((a for a in ancestors if a in self.files), None)
        if clash is not None:
            raise ToolError(f"cannot create folder {shown(path)!r}: {shown(clash)!r} is a file")
        created = [a for a in ancestors if a not in self.dirs]
        self.dirs.update(created)
        return created

    def write(self, path: str, content: str) -> None:
        """Create or overwrite a file whose folder exists."""
        if self.is_dir(path):
            raise ToolError(f"{shown(path)!r} is a folder; expected a file path")
        self.require_dir(parent(path), "parent folder")
        if path not in self.files and len(self.files) >= MAX_FILES:
            raise ToolError(f"the workspace already holds {MAX_FILES} files, the most it can")
        self.files[path] = content

    def move(self, src: str, dst: str) -> str:
        """Move a file or folder; into ``dst`` when that is a folder. Returns the new path."""
        if src == "":
            raise ToolError("cannot move the workspace root")
        if src not in self.files and src not in self.dirs:
            raise ToolError(f"source {shown(src)!r} does not exist")
        target = (f"{dst}/{basename(src)}" if dst else basename(src)) if self.is_dir(dst) else dst
        if target == src:
            raise ToolError(f"{shown(src)!r} is already at {shown(target)!r}")
        self.require_dir(parent(target), "destination folder")
        if target in self.files or target in self.dirs:
            raise ToolError(f"destination {shown(target)!r} already exists; remove it first or choose another name")
        sub_dirs, sub_files = self.under(src) if src in self.dirs else ([], [])
        if src in self.dirs and target.startswith(src + "/"):
            raise ToolError(f"cannot move folder {shown(src)!r} into itself ({shown(target)!r})")
        # what mkdir and write refuse, mv refuses too, for the moved path and everything under it
        depth = target.count("/") + 1 + max((p.count("/") - src.count("/") for p in sub_dirs + sub_files), default=0)
        if depth > MAX_DEPTH:
            raise ToolError(
                f"moving {_brief(src)!r} to {_brief(target)!r} would make a path {depth} folders deep; "
                f"expected at most {MAX_DEPTH}"
            )
        longest = len(target) + max((len(p) - len(src) for p in sub_dirs + sub_files), default=0)
        if longest > MAX_PATH_CHARS:
            raise ToolError(
                f"moving {_brief(src)!r} to {_brief(target)!r} would make a path {longest} characters "
                f"long; expected at most {MAX_PATH_CHARS}"
            )
        if src in self.dirs:
            self.dirs -= {src, *sub_dirs}
            self.dirs |= {target, *(target + d[len(src) :] for d in sub_dirs)}
            for f in sub_files:
                self.files[target + f[len(src) :]] = self.files.pop(f)
        else:
            self.files[target] = self.files.pop(src)
        return target

    def remove(self, path: str, recursive: bool) -> int:
        """Delete a file, or a folder (recursive=True when it is not empty). Returns files deleted."""
        if path == "":
            raise ToolError("cannot remove the workspace root")
        if path in self.files:
            del self.files[path]
            return 1
        if path not in self.dirs:
            raise ToolError(f"{shown(path)!r} does not exist")
        sub_dirs, sub_files = self.under(path)
        if (sub_dirs or sub_files) and not recursive:
            raise ToolError(
                f"folder {shown(path)!r} is not empty ({len(sub_files)} file(s)); "
                "pass recursive=true to delete it with its contents"
            )
        self.dirs -= {path, *sub_dirs}
        for f in sub_files:
            del self.files[f]
        return len(sub_files)


# ----------------------------------------------------------------------------------------------
# Task generation


def generate_task(p: FilesystemParams, rng: random.Random) -> dict[str, Any]:
    """The identity of one tidying task for params ``p``."""
    groups = rng.sample(MOVE_GROUPS, p.moves)
    used_exts = {e for _, exts, _ in groups for e in exts}
    renames = rng.sample([r for r in RENAMES if not {r[0], r[1]} & used_exts], p.renames)
    delete_exts = rng.sample(sorted(DELETE_EXTS), p.deletes)
    files: dict[str, str] = {}
    dirs = {"inbox", "system"}
    folders = ["inbox"]
    if p.nested:
        folders += [f"inbox/{n}" for n in rng.sample(NESTED, 2)]
        dirs.update(folders)
    names: set[str] = set()

    def new_file(folder: str, stem_pool: tuple[str, ...], ext: str) -> str:
        while True:  # unique basenames keep "moved" and "deleted" unambiguous across folders
            name = f"{rng.choice(stem_pool)}{rng.choice(['', '-1', '-2', '_v2', '-final', '-old'])}.{ext}"
            if name not in names:
                names.add(name)
                path = f"{folder}/{name}"
                files[path] = f"{rng.choice(WORDS)} {rng.randint(1000, 9999)}\n{name} {rng.choice(WORDS)}\n"
                return path

    rules: list[dict[str, Any]] = []
    for dest, exts, stems in groups:
        pairs = [
            (src, f"{dest}/{basename(src)}")
            for src in (new_file(rng.choice(folders), stems, rng.choice(exts)) for _ in range(p.files_per_rule))
        ]
        rules.append({"kind": "move", "exts": list(exts), "dest": dest, "pairs": [list(x) for x in pairs]})
    for ext in delete_exts:
        paths = [new_file(rng.choice(folders), DELETE_EXTS[ext], ext) for _ in range(p.files_per_rule)]
        rules.append({"kind": "delete", "exts": [ext], "paths": paths})
    for src_ext, dst_ext, stems in renames:
        pairs = [
            (src, src[: -len(src_ext)] + dst_ext)
            for src in (new_file(rng.choice(folders), stems, src_ext) for _ in range(p.files_per_rule))
        ]
        rules.append({"kind": "rename", "exts": [src_ext], "to": dst_ext, "pairs": [list(x) for x in pairs]})
    rule_exts = {e for r in rules for e in r["exts"]} | {r["to"] for r in rules if r["kind"] == "rename"}

    bystanders: list[str] = []
    spots = folders + ["notes"]
    for _ in range(p.bystanders):
        folder = rng.choice(spots)
        dirs.add(folder)
        bystanders.append(new_file(folder, BYSTANDERS, rng.choice([e for e in BYSTANDER_EXTS if e not in rule_exts])))
    if p.prefilled:
        for r in rules:
            if r["kind"] == "move":
                dirs.add(r["dest"])
                stems = next(g[2] for g in groups if g[0] == r["dest"])
                bystanders.append(new_file(r["dest"], stems, rng.choice(r["exts"])))
    trap_exts = sorted(rule_exts) if p.traps else ["sys", "dat", "cfg"]
    protected = [new_file("system", PROTECTED, rng.choice(trap_exts)) for _ in range(p.protected)]

    summary = _summary(rules, bystanders) if p.summary else None
    return {
        "files": files,
        "dirs": sorted(dirs),
        "rules": rules,
        "protected": protected,
        "bystanders": sorted(bystanders),
        "summary": summary,
        "goal": _goal_text(rules, summary, p.nested),
    }


def _summary(rules: list[dict[str, Any]], bystanders: list[str]) -> dict[str, Any]:
    """What report.txt must list: deleted names if anything is deleted, else the first move's folder."""
    deleted = [basename(x) for r in rules if r["kind"] == "delete" for x in r["paths"]]
    if deleted:
        return {"path": "report.txt", "lines": sorted(deleted), "text": "the names of all the files you deleted"}
    move = next((r for r in rules if r["kind"] == "move"), None)
    if move is not None:
        names = [basename(d) for _, d in move["pairs"]] + [basename(b) for b in bystanders if parent(b) == move["dest"]]
        return {
            "path": "report.txt",
            "lines": sorted(names),
            "text": f"the names of all the files in {move['dest']}/ once you are done",
        }
    renamed = [basename(d) for r in rules if r["kind"] == "rename" for _, d in r["pairs"]]
    return {"path": "report.txt", "lines": sorted(renamed), "text": "the new names of the files you renamed"}


def _ext_list(exts: list[str]) -> str:
    dotted = [f".{e}" for e in exts]
    return dotted[0] if len(dotted) == 1 else ", ".join(dotted[:-1]) + " and " + dotted[-1]


def _goal_text(rules: list[dict[str, Any]], summary: dict[str, Any] | None, nested: bool) -> str:
    where = "inbox/ (subfolders included)" if nested else "inbox/"
    lines = []
    for r in rules:
        if r["kind"] == "move":
            lines.append(
                f"Move every {_ext_list(r['exts'])} file in {where} directly into {r['dest']}/ "
                "(create the folder if it is missing)."
            )
        elif r["kind"] == "delete":
            lines.append(f"Delete every {_ext_list(r['exts'])} file in {where}.")
        else:
            lines.append(
                f"Rename every .{r['exts'][0]} file in {where} to end in .{r['to']} instead, keeping it in its folder."
            )
    if summary is not None:
        lines.append(
            f"Then write {summary['path']} in the workspace root listing {summary['text']} "
            "(names only, no folders), sorted alphabetically, one per line."
        )
    lines.append("Never change, move or delete anything in system/, and leave every other file as it is.")
    return "\n".join(f"- {line}" for line in lines)
