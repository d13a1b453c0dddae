"""Every constraint a tool argument declares reaches the schema the model sees: bounds, lengths,
patterns and choices, as pydantic's own JSON schema of the arguments states them."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from pydantic import Field

from campflow.bootcamps import registry
from campflow.bootcamps.base import ToolArgs
from campflow.bootcamps.schemas import CONSTRAINT_KEYS, declared_constraints, tool_schema

TOOLS = [
    (name, tool)
    for name in registry.BUILTIN
    for tool in registry.make(name).tools(registry.make(name).generate(None, 0))
]


def _resolve(schema: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref")
    if ref is None:
        return prop
    return {**schema["$defs"][ref.rsplit("/", 1)[-1]], **{k: v for k, v in prop.items() if k != "$ref"}}


def _declared(args_model: type) -> dict[str, dict[str, Any]]:
    """pydantic's JSON schema of the arguments: per field, its constraints and choices."""
    schema = args_model.model_json_schema()
    out = {}
    for field, prop in schema.get("properties", {}).items():
        prop = _resolve(schema, prop)
        found = declared_constraints(prop)
        if "enum" in prop:
            found["enum"] = prop["enum"]
        out[field] = found
    return out


@pytest.mark.parametrize(("name", "tool"), TOOLS, ids=[f"{n}.{t.name}" for n, t in TOOLS])
def test_each_builtin_tool_schema_states_what_pydantic_declares(name: str, tool: Any) -> None:
    shown = tool.schema()["function"]["parameters"]["properties"]
    for field, constraints in _declared(tool.args_model).items():
        for key, value in constraints.items():
            assert shown[field].get(key) == value, (name, tool.name, field, key)


class PickArgs(ToolArgs):
    count: int = Field(ge=1, le=50, description="how many to pick")
    share: float = Field(0.5, gt=0, lt=1, description="a share")
    code: str = Field(min_length=2, max_length=6, pattern=r"^[a-z]+\d*$", description="a bin code")
    side: Literal["left", "right"] = Field("left", description="which side")
    limit: int | None = Field(None, ge=3, description="an optional limit")
    tags: list[str] = Field(default_factory=list, max_length=4, description="tags")


def test_field_bounds_reach_the_tool_schema() -> None:
    props = tool_schema("pick", "Pick items.", PickArgs)["function"]["parameters"]["properties"]
    assert props["count"] == {"type": "integer", "minimum": 1, "maximum": 50, "description": "how many to pick"}
    assert props["share"]["exclusiveMinimum"] == 0 and props["share"]["exclusiveMaximum"] == 1
    assert (props["code"]["minLength"], props["code"]["maxLength"], props["code"]["pattern"]) == (2, 6, r"^[a-z]+\d*$")
    assert props["side"]["enum"] == ["left", "right"]
    assert props["limit"] == {"type": "integer", "minimum": 3, "nullable": True, "description": "an optional limit"}
    assert props["tags"]["maxItems"] == 4
    for field, constraints in _declared(PickArgs).items():
        assert {k: props[field][k] for k in constraints} == constraints
    assert set(CONSTRAINT_KEYS) >= {"minimum", "maximum", "minLength", "maxLength", "pattern"}


def test_rl_prompts_render_the_bootcamps_schema_with_its_bounds_where_trl_would_drop_them() -> None:
    import inspect

    from transformers.utils import get_json_schema

    from campflow.sources import ImportSpec, register_import
    from campflow.sources.authored import source_sha256
    from campflow.training.environments import environment_class, rendered_tools
    from tests.test_own_bootcamp import WAREHOUSE

    sha = source_sha256(WAREHOUSE.read_text(encoding="utf-8"))
    register_import(
        ImportSpec(name="warehouse", adapter="bootcamp", source=str(WAREHOUSE), options={"sha256": sha}), replace=True
    )
    env = environment_class("warehouse")
    methods = [getattr(env(), n) for n, _ in inspect.getmembers(env, inspect.isfunction) if not n.startswith("_")]
    methods = [m for m in methods if m.__name__ not in ("reset", "get_reward")]
    rendered = rendered_tools(env, methods)
    assert [r["function"]["name"] for r in rendered] == [m.__name__ for m in methods]  # TRL's order kept
    pick = next(r for r in rendered if r["function"]["name"] == "pick")["function"]["parameters"]["properties"]
    assert (pick["count"]["minimum"], pick["count"]["maximum"]) == (1, 50)
    trl = get_json_schema(env.pick)["function"]["parameters"]["properties"]["count"]
    assert "minimum" not in trl  # what TRL alone would have shown the model
    assert {k: v for k, v in pick["count"].items() if k not in ("minimum", "maximum")} == trl
