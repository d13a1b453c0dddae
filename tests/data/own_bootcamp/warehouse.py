"""An order-picking warehouse, written from campflow/bootcamps/base.py alone (the user's own file)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pydantic import Field

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    NoArgs,
    Observation,
    Params,
    Score,
    State,
    ToolArgs,
    ToolError,
    tool,
    tool_results,
)

ITEMS = ["bolt", "nut", "washer", "screw", "hinge", "spring", "gasket", "rivet"]


class WarehouseParams(Params):
    bins: int = Field(3, ge=2, le=12, description="bins on the floor")
    lines: int = Field(1, ge=1, le=5, description="order lines (items asked for)")


class BinArgs(ToolArgs):
    bin_id: str = Field(description="a bin id, as list_bins shows it")


class PickArgs(ToolArgs):
    bin_id: str = Field(description="the bin to pick from")
    item: str = Field(description="the item, as look shows it")
    count: int = Field(ge=1, le=50, description="how many to pick")


@dataclass
class WarehouseState(State):
    bins: dict[str, dict[str, int]] = field(default_factory=dict)
    basket: dict[str, int] = field(default_factory=dict)


class Warehouse(Bootcamp[WarehouseParams, WarehouseState]):
    """Pick the items of an order from the warehouse bins.

    The order lists items and counts. `list_bins` shows the bin ids, `look` shows what a bin holds
    (e.g. "bolt x2"), `pick` moves items into your basket, `put_back` returns them, and `submit` ships
    the basket: it must hold exactly the order.

    Levels add bins and order lines. Reward 1 for the exact order, else 0 (reason `wrong_basket`).
    """

    name = "warehouse"
    version = "1"
    params_model = WarehouseParams
    state_model = WarehouseState
    default_max_turns = 30
    levels = {
        1: WarehouseParams(level=1, bins=3, lines=1),
        2: WarehouseParams(level=2, bins=5, lines=2),
        3: WarehouseParams(level=3, bins=8, lines=3),
    }

    def build(self, params, rng):
        ids = rng.sample(range(10, 100), params.bins)
        bins = {f"b{i}": {} for i in ids}
        for bin_id in bins:
            for item in rng.sample(ITEMS, 2):
                bins[bin_id][item] = rng.randint(1, 6)
        stocked = sorted({(item, b) for b, held in bins.items() for item in held})
        order: dict[str, int] = {}
        for item, bin_id in rng.sample(stocked, min(params.lines, len(stocked))):
            if item not in order:
                order[item] = rng.randint(1, bins[bin_id][item])
        return {"bins": bins, "order": order}

    def prompt(self, instance):
        wanted = ", ".join(f"{n} {item}" for item, n in sorted(instance.data["order"].items()))
        return self.chat(f"Order: {wanted}. Pick it and submit.")

    def new_state(self, instance):
        return WarehouseState(bins={b: dict(held) for b, held in instance.data["bins"].items()})

    @tool
    def list_bins(self, instance, state, args: NoArgs) -> Observation:
        "List the bin ids."
        return Observation("Bins: " + ", ".join(sorted(state.bins)))

    @tool
    def look(self, instance, state, args: BinArgs) -> Observation:
        "Show what one bin holds."
        held = self._bin(state, args.bin_id)
        shown = ", ".join(f"{item} x{n}" for item, n in sorted(held.items()) if n) or "empty"
        return Observation(f"Bin {args.bin_id}: {shown}")

    @tool
    def pick(self, instance, state, args: PickArgs) -> Observation:
        "Move items from a bin into your basket."
        held = self._bin(state, args.bin_id)
        if held.get(args.item, 0) < args.count:
            raise ToolError(f"bin {args.bin_id} holds {held.get(args.item, 0)} {args.item}")
        held[args.item] -= args.count
        state.basket[args.item] = state.basket.get(args.item, 0) + args.count
        return Observation(f"Picked {args.count} {args.item}.")

    @tool
    def put_back(self, instance, state, args: PickArgs) -> Observation:
        "Return items from your basket to a bin."
        held = self._bin(state, args.bin_id)
        if state.basket.get(args.item, 0) < args.count:
            raise ToolError(f"your basket holds {state.basket.get(args.item, 0)} {args.item}")
        state.basket[args.item] -= args.count
        held[args.item] = held.get(args.item, 0) + args.count
        return Observation(f"Put back {args.count} {args.item}.")

    @tool(final=True)
    def submit(self, instance, state, args: NoArgs) -> Observation:
        "Ship the basket (ends the episode)."
        state.answer = {item: n for item, n in state.basket.items() if n}
        return Observation("Shipped.", final=True)

    def score(self, instance, state, transcript):
        ok = state.answer == instance.data["order"]
        return Score(float(ok), ok, {} if ok else {"reason": "wrong_basket"})

    def _bin(self, state, bin_id):
        if bin_id not in state.bins:
            raise ToolError(f"no bin {bin_id!r}; list_bins shows the ids")
        return state.bins[bin_id]

    def _next_pick(self, order, state, holdings):
        """The next pick of a whole order line from one bin of ``holdings`` (bin -> item -> count) that
        holds enough, or None."""
        for item, n in sorted(order.items()):
            if state.basket.get(item, 0) >= n:
                continue
            for bin_id, held in sorted(holdings.items()):
                if held.get(item, 0) >= n:
                    return Action("pick", {"bin_id": bin_id, "item": item, "count": n})
        return None

    def oracle(self, instance, state):
        return self._next_pick(instance.data["order"], state, state.bins) or Action("submit", {})

    def demonstrate(self, instance, state, transcript):
        order = instance.data["order"]  # the prompt shows it
        results = tool_results(transcript)
        if not results:
            return Action("list_bins", {})
        ids = re.findall(r"b\d+", results[0])
        seen = {}
        for text in results:
            m = re.match(r"Bin (b\d+): (.*)", text)
            if m:
                seen[m.group(1)] = {item: int(n) for item, n in re.findall(r"(\w+) x(\d+)", m.group(2))}
        for bin_id, held in seen.items():  # what was picked since it was looked at
            for item in held:
                held[item] = state.bins[bin_id].get(item, 0)
        step = self._next_pick(order, state, seen)
        if step is not None:
            return step
        unseen = [b for b in ids if b not in seen]
        if unseen and any(n > state.basket.get(item, 0) for item, n in order.items()):
            return Action("look", {"bin_id": unseen[0]})
        return Action("submit", {})

    def wrong_answer(self, instance, state, rng):
        return Action("submit", {})
