"""Turning a model's reply into tool calls: native ``tool_calls`` or Qwen-style ``<tool_call>`` text.

Nothing here raises on model output. Every problem becomes either a :class:`ParsedCall` with an
``error`` (sent back to the model as the tool's observation) or a turn-level ``format_error``.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from campflow.bootcamps.base import Tool, format_validation_error

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
NO_LIMIT = sys.maxsize
_THINK_RE = re.compile(r"^\s*<think>(.*?)</think>", re.S)


@dataclass(slots=True)
class ParsedCall:
    """One tool call, validated against the tool's argument model.

    ``error`` is None for a usable call; otherwise it is the message for the model and ``error_kind``
    one of: ``invalid_json``, ``not_an_object``, ``unknown_tool``, ``missing_argument``,
    ``extra_argument``, ``wrong_type``, ``too_many_calls``.
    """

    id: str
    name: str
    raw_arguments: str
    arguments: Any = None  # the validated ToolArgs model
    error: str | None = None
    error_kind: str | None = None
    span: tuple[int, int] | None = None  # where a text call's <tool_call> block lies in the reply


@dataclass(slots=True)
class ParsedTurn:
    """A reply split into reasoning, visible content and tool calls."""

    content: str
    reasoning: str | None
    calls: list[ParsedCall] = field(default_factory=list)
    format_error: str | None = None  # set when the reply has no usable call structure at all
    source: str = "none"  # "native", "text" or "none"

    @property
    def has_valid_call(self) -> bool:
        """Whether at least one call can be executed."""
        for c in self.calls:
            if c.error is None:
                return True
        return False


def clean_text(text: Any) -> str:
    """Text that is safe to store and send back: a string, with lone surrogates replaced."""
    if type(text) is str and text.isascii():
        return text
    if text is None:
        return ""
    if not isinstance(text, str):
        text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")


def split_reasoning(content: str) -> tuple[str | None, str]:
    """Separate a leading ``<think>...</think>`` block from the visible content."""
    m = _THINK_RE.match(content)
    if not m:
        return None, content
    return m.group(1).strip(), content[m.end() :].lstrip()


def parse_turn(
    content: Any,
    native_calls: Any,
    tools: Mapping[str, Tool],
    *,
    turn: int = 0,
    reasoning: Any = None,
    max_calls: int = 8,
    max_chars: int = NO_LIMIT,
) -> ParsedTurn:
    """Parse one assistant reply against the available ``tools`` (name -> Tool).

    Native calls win when both are present: endpoints that parse tool calls server-side may leave the
    raw ``<tool_call>`` text in ``content`` as well, and executing both would run every call twice.

    A reply longer than ``max_chars`` (content and native calls' ids, names and arguments together) is
    a format error whose content is cut to ``max_chars``; none of its calls run. Reasoning an endpoint
    returns apart (``reasoning_content``) does not count: a thinking model's reasoning is bounded by
    its token budget (``policy.max_tokens``), and a long thought is not malformed output; past
    ``max_chars`` it is kept cut, with a note of how much was left out.

    A text call that names a tool is recorded once: its ``<tool_call>`` block leaves ``content`` (the
    call is in ``calls``), so a chat template renders the model's history as it renders native calls.
    Blocks that are not a ``{"name": ..., "arguments": ...}`` object stay in ``content``, so the
    model sees what it wrote wrong.
    """
    fast = one_native_call(content, native_calls, reasoning, tools, max_calls, max_chars)
    if fast is not None:
        return ParsedTurn(content="", reasoning=None, calls=[fast], source="native")
    text = clean_text(content)
    reasoning_text = clean_text(reasoning)
    if len(reasoning_text) > max_chars:  # kept, but not all of it: the transcript stays within the limits
        reasoning_text = (
            reasoning_text[:max_chars] + f"\n[... truncated, {len(reasoning_text) - max_chars} more characters]"
        )
    if len(text) > max_chars:  # before any parsing: nothing of an overlong reply is read
        return _overlong(text, len(text), max_chars)
    think, text = split_reasoning(text) if "<think>" in text else (None, text)
    turn_result = ParsedTurn(content=text, reasoning=reasoning_text or think or None)
    raw_calls: list[tuple[str, str, Any, tuple[int, int] | None]] = []  # (id, name, arguments as given, span)
    if native_calls:
        turn_result.source = "native"
        if not isinstance(native_calls, list):
            turn_result.format_error = "tool_calls must be a list of calls"
            return turn_result
        for i, call in enumerate(native_calls):
            fn = call.get("function") if isinstance(call, dict) else None
            if not isinstance(fn, dict):
                turn_result.calls.append(
                    ParsedCall(
                        f"call_{turn}_{i}", "", "", error="a tool call without a function", error_kind="not_an_object"
                    )
                )
                continue
            cid = call.get("id") or f"call_{turn}_{i}"
            raw_calls.append((clean_text(cid), clean_text(fn.get("name")), fn.get("arguments"), None))
    elif TOOL_CALL_OPEN in text:
        turn_result.source = "text"
        spans = tool_call_blocks(text)
        unclosed = text.count(TOOL_CALL_OPEN) - len(spans)
        if not spans:
            turn_result.format_error = "found <tool_call> without a closing </tool_call>"
            return turn_result
        for i, span in enumerate(spans):
            cid = f"call_{turn}_{i}"
            body = text[span[0] + len(TOOL_CALL_OPEN) : span[1] - len(TOOL_CALL_CLOSE)]
            obj, problem = _load_json(body)
            if problem is not None:
                turn_result.calls.append(
                    ParsedCall(
                        cid,
                        "",
                        body.strip()[:500],
                        error=f"the <tool_call> body is not valid JSON ({problem})",
                        error_kind="invalid_json",
                    )
                )
                continue
            if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
                turn_result.calls.append(
                    ParsedCall(
                        cid,
                        "",
                        body.strip()[:500],
                        error='a <tool_call> must hold {"name": ..., "arguments": {...}}',
                        error_kind="not_an_object",
                    )
                )
                continue
            raw_calls.append((cid, obj["name"], obj.get("arguments", {}), span))
        if unclosed > 0:
            turn_result.calls.append(
                ParsedCall(
                    f"call_{turn}_{len(spans)}",
                    "",
                    "",
                    error="a <tool_call> was not closed; it was ignored",
                    error_kind="invalid_json",
                )
            )
    else:
        return turn_result
    for cid, name, arguments, span in raw_calls:
        if len(turn_result.calls) >= max_calls:
            turn_result.calls.append(
                ParsedCall(
                    cid,
                    name,
                    _arguments_text(arguments)[0],
                    error=f"more than {max_calls} calls in one turn; this call was not run",
                    error_kind="too_many_calls",
                    span=span,
                )
            )
            break
        call = _validate(cid, name, arguments, tools)
        call.span = span
        turn_result.calls.append(call)
    chars = len(text) + sum(len(c.id) + len(c.name) + len(c.raw_arguments) for c in turn_result.calls if c.span is None)
    if chars > max_chars:
        return _overlong(text, chars, max_chars)
    if turn_result.source == "text":
        turn_result.content = _without_blocks(text, [c.span for c in turn_result.calls if c.name and c.span])
    return turn_result


def tool_call_blocks(text: str) -> list[tuple[int, int]]:
    """The ``(start, end)`` of every closed ``<tool_call>...</tool_call>`` block, in order.

    What ``re.findall(r"<tool_call>(.*?)</tool_call>", re.S)`` finds, in one pass: the regex rescans
    the rest of the text from every unclosed tag, quadratic in the number of tags.
    """
    spans = []
    start = text.find(TOOL_CALL_OPEN)
    while start >= 0:
        end = text.find(TOOL_CALL_CLOSE, start + len(TOOL_CALL_OPEN))
        if end < 0:
            break  # no closing tag after this one, so none after any later opening tag either
        end += len(TOOL_CALL_CLOSE)
        spans.append((start, end))
        start = text.find(TOOL_CALL_OPEN, end)
    return spans


def _without_blocks(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    pieces, at = [], 0
    for start, end in spans:
        pieces.append(text[at:start])
        at = end
    pieces.append(text[at:])
    return "".join(pieces).strip()


def _overlong(text: str, chars: int, max_chars: int) -> ParsedTurn:
    return ParsedTurn(
        content=text[:max_chars],
        reasoning=None,
        format_error=f"the reply has {chars} characters; at most {max_chars} are read",
    )


def _load_json(text: str) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, what is wrong)`` for text that is not JSON Python can hold."""
    try:
        return json.loads(text), None
    except json.JSONDecodeError as exc:
        return None, exc.msg
    except RecursionError:
        return None, "nested too deeply"
    except ValueError:  # the only other: an integer longer than int <-> str conversion allows
        return None, f"a number has more than {sys.get_int_max_str_digits()} digits"


def _arguments_text(arguments: Any) -> tuple[str, str | None]:
    """Arguments as JSON text, safe to store, or ``("", what is wrong)`` when they cannot be written."""
    if isinstance(arguments, str):
        return clean_text(arguments), None
    try:
        return clean_text(json.dumps(arguments, ensure_ascii=False, default=str)), None
    except RecursionError:
        return "", "they are nested too deeply"
    except ValueError:
        return "", f"a number has more than {sys.get_int_max_str_digits()} digits"


def one_native_call(
    content: Any,
    native_calls: Any,
    reasoning: Any,
    tools: Mapping[str, Tool],
    max_calls: int = 8,
    max_chars: int = NO_LIMIT,
) -> ParsedCall | None:
    """The turn most replies are: no text, no reasoning, one well-formed native call to a known tool
    with valid arguments, within ``max_chars``.

    Returns what the general path of :func:`parse_turn` would, or None for anything else (which then
    takes the general path). Most turns of a long rollout come through here, so it checks types
    exactly instead of cleaning and copying.
    """
    if not (
        (content is None or content == "")
        and reasoning is None
        and type(native_calls) is list
        and len(native_calls) == 1
        and max_calls > 0
    ):
        return None
    call = native_calls[0]
    fn = call.get("function") if type(call) is dict else None
    if type(fn) is not dict:
        return None
    cid, name, raw = call.get("id"), fn.get("name"), fn.get("arguments")
    if not (
        type(cid) is str
        and type(name) is str
        and type(raw) is str
        and cid
        and raw
        and cid.isascii()
        and name.isascii()
        and raw.isascii()
        and len(cid) + len(name) + len(raw) <= max_chars
    ):
        return None
    tool = tools.get(name)
    if tool is None:
        return None
    try:  # the model's validator itself: model_validate_json without its keyword handling
        return ParsedCall(cid, name, raw, tool.args_model.__pydantic_validator__.validate_json(raw))
    except ValidationError:
        return None


def _validate(cid: str, name: str, arguments: Any, tools: Mapping[str, Tool]) -> ParsedCall:
    raw, unwritable = _arguments_text(arguments)
    if unwritable is not None:
        return ParsedCall(
            cid, name, raw, error=f"arguments of {name[:80]} cannot be read: {unwritable}", error_kind="invalid_json"
        )
    tool = tools.get(name)
    if tool is not None and raw:
        try:  # the common case in one step: pydantic parses and validates the JSON text together
            return ParsedCall(cid, name, raw, arguments=tool.args_model.model_validate_json(raw))
        except ValidationError:
            pass  # below, the slow path finds out exactly what is wrong, for the model's benefit
    if tool is None:
        return ParsedCall(
            cid,
            name,
            raw,
            error=f"unknown tool {name[:80]!r}; available: {', '.join(tools)}",
            error_kind="unknown_tool",
        )
    if isinstance(arguments, str):
        arguments, problem = _load_json(arguments) if arguments.strip() else ({}, None)
        if problem is not None:
            return ParsedCall(
                cid, name, raw, error=f"arguments of {name} are not valid JSON ({problem})", error_kind="invalid_json"
            )
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return ParsedCall(
            cid,
            name,
            raw,
            error=f"arguments of {name} must be a JSON object, got {type(arguments).__name__}",
            error_kind="not_an_object",
        )
    try:
        model = tool.args_model.model_validate(arguments)
    except ValidationError as exc:
        kinds = {e["type"] for e in exc.errors()}
        kind = (
            "missing_argument"
            if "missing" in kinds
            else "extra_argument"
            if "extra_forbidden" in kinds
            else "wrong_type"
        )
        return ParsedCall(
            cid, name, raw, error=f"invalid arguments for {name}: {format_validation_error(exc)}", error_kind=kind
        )
    return ParsedCall(cid, name, raw, arguments=model)
