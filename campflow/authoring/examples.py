"""The examples of a task (``campflow author --examples EX.jsonl``): one JSON object per line, ``input`` and
``answer`` (``inputs`` and ``answers`` are read too).

The input is whatever describes one task (a string, an object); the answer is what a correct agent
submits for it. The module the LLM writes turns an input into an identity (``example_identity``), and
the contract requires its oracle to answer each example as the file does
(:func:`campflow.authoring.checks.answers_match`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from campflow.errors import AuthoringError

MAX_EXAMPLES = 1000
_KEYS = {"input": ("input", "inputs"), "answer": ("answer", "answers")}


def read_examples(path: Path) -> list[dict[str, Any]]:
    """The examples in ``path``, each ``{"input": ..., "answer": ...}``; blank lines are skipped.

    Raises:
        AuthoringError: the file is missing or unreadable, a line is not a JSON object with an input and
            an answer, or it holds no example (or more than :data:`MAX_EXAMPLES`); the message names the
            file and the line.
    """
    if not path.is_file():
        raise AuthoringError(f"examples file {path} does not exist" + (" (it is a folder)" if path.is_dir() else ""))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise AuthoringError(f"examples file {path} is not UTF-8 text; expected JSON lines") from None
    except OSError as exc:
        raise AuthoringError(f"examples file {path} cannot be read: {exc.strerror or exc}") from None
    examples = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise AuthoringError(
                f"{path} line {number}: not JSON ({exc.msg}); expected one object per line with input and answer"
            ) from None
        if not isinstance(row, dict):
            raise AuthoringError(
                f"{path} line {number}: a JSON {type(row).__name__}; expected an object with input and answer"
            )
        example = {}
        for key, names in _KEYS.items():
            found = [n for n in names if n in row]
            if not found:
                raise AuthoringError(
                    f"{path} line {number}: no {key!r} key (it has {', '.join(map(repr, row)) or 'none'}); "
                    "expected an object with input and answer"
                )
            example[key] = row[found[0]]
        examples.append(example)
    if not examples:
        raise AuthoringError(f"examples file {path} holds no example; expected JSON lines with input and answer")
    if len(examples) > MAX_EXAMPLES:
        raise AuthoringError(f"examples file {path} holds {len(examples)} examples; at most {MAX_EXAMPLES} are checked")
    return examples
