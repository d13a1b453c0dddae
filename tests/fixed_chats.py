"""Fixed tool-calling conversations, independent of every bootcamp, for training regression references.

A change to a bootcamp (its prompts, its oracle) changes the embedded model's corpus and data; these
conversations never change, so a tiny model and an SFT dataset built from them are the same bytes on
every checkout, and a loss recorded from them once stays a valid reference.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculate",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. 2 + 3"}},
                "required": ["expression"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "submit",
            "description": "Submit the final answer.",
            "parameters": {
                "type": "object",
                "properties": {"answer": {"type": "string", "description": "the answer"}},
                "required": ["answer"],
            },
        },
    },
]
SYSTEM = "You are an agent. Use the tools; finish with submit."


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def conversations(n: int = 24, seed: int = 0) -> list[list[dict[str, Any]]]:
    """``n`` calculate-then-submit conversations in TRL's message format (arguments as objects)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(1, 99), rng.randint(1, 99)
        out.append(
            [
                {"role": "system", "content": SYSTEM},
                {"role": "user", "content": f"What is {a} + {b}?"},
                {"role": "assistant", "content": "", "tool_calls": [_call("calculate", expression=f"{a} + {b}")]},
                {"role": "tool", "name": "calculate", "content": str(a + b)},
                {"role": "assistant", "content": "", "tool_calls": [_call("submit", answer=str(a + b))]},
                {"role": "tool", "name": "submit", "content": "correct"},
            ]
        )
    return out


def corpus(template: str, n: int = 24) -> list[str]:
    """The conversations rendered through ``template``: the text a tokenizer is trained on."""
    from transformers.utils.chat_template_utils import render_jinja_template

    texts = []
    for chat in conversations(n):
        rendered = render_jinja_template([chat], tools=TOOLS, chat_template=template)
        texts.append(rendered[0][0] if isinstance(rendered, tuple) else rendered[0])
    return texts


TINY = {
    "seed": 0,
    "vocab_size": 400,
    "hidden_size": 32,
    "intermediate_size": 64,
    "layers": 2,
    "heads": 2,
    "kv_heads": 1,
    "max_positions": 512,
    "corpus_per_level": 1,
    "pretrain": {"steps": 0},  # the loss reference of test_hardware is for an untrained model
}


def save_sft_dataset(store: Any, path: Path, dataset_id: str = "sft-fixed", n: int = 24) -> str:
    """Write the conversations as an SFT dataset (the columns campflow's filter writes) and record it."""
    import datasets

    from campflow.storage.store import now

    rows = [
        {
            "messages": chat,
            "tools": json.dumps(TOOLS),
            "episode_id": f"e{i}",
            "instance_id": f"i{i}",
            "bootcamp": "fixed",
            "level": 1,
            "reward": 1.0,
        }
        for i, chat in enumerate(conversations(n))
    ]
    features = datasets.Features(
        {
            "messages": datasets.List(datasets.Json()),
            "tools": datasets.Value("string"),
            "episode_id": datasets.Value("string"),
            "instance_id": datasets.Value("string"),
            "bootcamp": datasets.Value("string"),
            "level": datasets.Value("int32"),
            "reward": datasets.Value("float64"),
        }
    )
    datasets.Dataset.from_list(rows, features=features).save_to_disk(str(path))
    with store.connection() as con:
        con.execute(
            "INSERT OR REPLACE INTO datasets (dataset_id, kind, path, rows, filter, source_runs, created_at) "
            "VALUES (?, 'sft', ?, ?, '{}', [], ?)",
            [dataset_id, str(path), len(rows), now()],
        )
    return dataset_id
