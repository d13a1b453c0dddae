"""The authoring loop behind ``campflow author``: ask the LLM for a module, judge it, send failures back.

Round 1 sends the system prompt (:mod:`campflow.authoring.prompt`) and the task; each later round, up
to ``author.rounds`` of them, sends what failed with its evidence. A module is judged by the contract in
sandboxed processes (:mod:`campflow.authoring.contract_run`); this process imports it only where
``integrity.hacker`` names a model and every sandboxed check held, to play the model's adversarial pass
on it (the sandbox has no network; an accepted module runs here anyway). The first
module to pass every check is accepted: recorded in ``imported_bootcamps`` with adapter ``authored``
(its file and source hash), so every command and flow resolves it by name through the workspace. When
the rounds are spent the attempt is rejected and its modules stay in the workspace with the reasons.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from campflow.authoring import prompt
from campflow.authoring.contract_run import ContractReport, Verdict, add_hacker_verdicts, run_contract
from campflow.authoring.examples import read_examples
from campflow.authoring.records import Attempt, new_attempt_id, record_verdicts, save_module
from campflow.bootcamps.base import format_validation_error
from campflow.config import AuthorLLMConfig, CampflowConfig
from campflow.errors import AuthoringError, ConfigError, PolicyError
from campflow.sources import ImportSpec, default_name, register_import
from campflow.sources.authored import HASH_OPTION, authored_version, build
from campflow.storage.imports import check_name_free, record
from campflow.storage.probes import record_probes
from campflow.storage.workspace import Workspace


@dataclass
class AuthorRound:
    """One reply and its verdicts."""

    number: int
    sha256: str | None  # None: the reply held no module
    verdicts: list[Verdict]
    module_path: Path | None = None

    @property
    def accepted(self) -> bool:
        """Whether every check passed."""
        return bool(self.verdicts) and all(v.passed for v in self.verdicts)


@dataclass
class AuthorResult:
    """What ``campflow author`` ended with: the attempt, its rounds, and the bootcamp if accepted."""

    attempt_id: str
    name: str
    accepted: bool
    rounds: list[AuthorRound] = field(default_factory=list)
    spec: ImportSpec | None = None  # the import on record, when accepted
    info: dict[str, Any] = field(default_factory=dict)  # class, levels, tools of the last module judged

    @property
    def reasons(self) -> list[str]:
        """The last round's failures, one line each."""
        return [v.line() for v in self.rounds[-1].verdicts if v.passed is False] if self.rounds else []


def author_bootcamp(
    task: Path,
    *,
    cfg: CampflowConfig,
    examples: Path | None = None,
    name: str | None = None,
    rounds: int | None = None,
    replace: bool = False,
    say: Callable[[str], None] | None = None,
) -> AuthorResult:
    """Have the LLM of ``cfg.author.llm`` write a bootcamp for the task in ``task`` (Markdown) and judge it.

    Args:
        task: the task description.
        cfg: the configuration (``author``: the LLM, rounds, instances, sandbox; ``workspace``).
        examples: a JSONL file of examples (``input``, ``answer``) the module's oracle must reproduce.
        name: the bootcamp's name (default ``au-<task file stem>``).
        rounds: repair rounds after the first module (default ``cfg.author.rounds``).
        replace: replace an earlier import or authored bootcamp of this name once a module is accepted.
        say: receives one line per round.

    Returns:
        The result; ``accepted`` False when no module passed within the rounds (kept with the reasons).

    Raises:
        AuthoringError: a missing or bad task or examples file, a taken name, an endpoint that fails.
        ConfigError: no model is configured.
    """
    say = say or (lambda _: None)
    text, examples_list = _read_task(task), (read_examples(examples) if examples is not None else [])
    name = name or default_name("authored", task.stem)
    try:
        ImportSpec(name=name, adapter="authored", source=str(task))
    except ValidationError as exc:
        raise AuthoringError(format_validation_error(exc)) from None
    llm = cfg.author.llm
    if not llm.model:
        raise ConfigError("author.llm.model is required by campflow author (pass --model)")
    ws = Workspace.from_config(cfg)
    ws.load_imports()
    check_name_free(name, ws.store, replace=replace)
    attempt = Attempt(
        new_attempt_id(),
        name,
        str(task.absolute()),
        hashlib.sha256(text.encode()).hexdigest(),
        str(examples.absolute()) if examples is not None else None,
        len(examples_list),
        llm.model,
    )
    attempt.save(ws.store)
    result = AuthorResult(attempt.attempt_id, name, False)
    messages = [
        {"role": "system", "content": prompt.system_prompt(cfg.author, name, with_examples=bool(examples_list))},
        {"role": "user", "content": prompt.task_message(text, examples_list, name)},
    ]
    try:
        for number in range(1, (cfg.author.rounds if rounds is None else rounds) + 2):
            reply = ask(llm, messages)
            messages.append({"role": "assistant", "content": reply})
            judged, report = _judge(reply, number, name, examples_list, cfg, ws)
            result.rounds.append(judged)
            result.info = report.info if report is not None else result.info
            attempt.rounds, attempt.source_sha256 = number, judged.sha256 or attempt.source_sha256
            attempt.module_path = str(judged.module_path) if judged.module_path else attempt.module_path
            record_verdicts(
                ws.store, attempt, number, judged.verdicts, judged.sha256, report.isolation if report else ()
            )
            say(_round_line(judged))
            if judged.accepted:
                assert judged.sha256 is not None and judged.module_path is not None
                result.spec = _accept(ws, name, judged.module_path, judged.sha256)
                result.accepted = True
                attempt.finish(ws.store, "accepted")
                return result
            attempt.save(ws.store)
            messages.append({"role": "user", "content": prompt.repair_message(report, judged.verdicts[0].reason)})
    except BaseException as exc:  # the endpoint failed, or the user stopped it: the attempt says so
        attempt.finish(ws.store, "failed", f"{type(exc).__name__}: {exc}"[:1000])
        raise
    attempt.finish(ws.store, "rejected", "; ".join(result.reasons)[:4000] or "no module passed")
    return result


def ask(llm: AuthorLLMConfig, messages: list[dict[str, Any]]) -> str:
    """One reply of the authoring LLM (its text), through the project's endpoint policy.

    Raises:
        AuthoringError: the endpoint could not be reached or failed after its retries (one line naming it).
    """
    from campflow.agents.openai_policy import EndpointPolicy

    policy = EndpointPolicy(
        llm.model or "",
        llm.base_url,
        api_key_env=llm.api_key_env,
        temperature=llm.temperature,
        max_tokens=llm.max_tokens,
        timeout=llm.timeout,
        max_retries=llm.max_retries,
    )

    async def once() -> Any:
        try:
            return await policy.respond(messages, [], None)  # type: ignore[arg-type]  (endpoints ignore the turn context)
        finally:
            await policy.aclose()

    try:
        reply = asyncio.run(once())
    except PolicyError as exc:
        raise AuthoringError(f"the authoring LLM failed: {exc}") from None
    return reply.content or ""


def _judge(
    reply: str, number: int, name: str, examples: list[dict[str, Any]], cfg: CampflowConfig, ws: Workspace
) -> tuple[AuthorRound, ContractReport | None]:
    source, problem = prompt.read_module(reply)
    if source is None:
        return AuthorRound(number, None, [Verdict("reply", None, False, problem)]), None
    path = save_module(ws.path, name, source)
    report = run_contract(
        source, name=name, examples=examples, instances=cfg.author.instances, limits=cfg.author.sandbox
    )
    spec = ImportSpec(name=name, adapter="authored", source=str(path), options={HASH_OPTION: report.sha256})
    add_hacker_verdicts(report, lambda: build(spec), cfg.integrity.hacker)
    if report.probes:  # the adversarial pass's episodes, with their transcripts, whether or not they refused it
        record_probes(ws.store, report.probes, subject=name, source="author")
    return AuthorRound(number, report.sha256, [Verdict("reply", None, True), *report.verdicts], path), report


def _accept(ws: Workspace, name: str, path: Path, sha256: str) -> ImportSpec:
    spec = ImportSpec(
        name=name, adapter="authored", source=str(path), options={HASH_OPTION: sha256}, version=authored_version(sha256)
    )
    record(ws.store, spec)
    register_import(spec, replace=True)
    return spec


def _round_line(judged: AuthorRound) -> str:
    module = f"module {judged.sha256[:12]}" if judged.sha256 else "no module"
    ran = [v for v in judged.verdicts if v.passed is not None]
    if judged.accepted:
        return f"round {judged.number}: {module}: all {len(ran)} checks passed"
    failed = [v for v in judged.verdicts if v.passed is False]
    return f"round {judged.number}: {module}: {len(failed)} of {len(ran)} checks failed; first: {failed[0].line()}"


def _read_task(task: Path) -> str:
    if not task.is_file():
        raise AuthoringError(f"task description {task} does not exist" + (" (it is a folder)" if task.is_dir() else ""))
    try:
        text = task.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AuthoringError(f"task description {task} is not UTF-8 text; expected Markdown") from None
    except OSError as exc:
        raise AuthoringError(f"task description {task} cannot be read: {exc.strerror or exc}") from None
    if not text.strip():
        raise AuthoringError(f"task description {task} is empty; describe the task in Markdown")
    return text
