"""shop: find and buy the product a shopper describes, WebShop-style (see catalog.py for the catalog)."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Exemptions,
    Instance,
    NoArgs,
    Observation,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.bootcamps.messages import clip
from campflow.bootcamps.shop.catalog import ShopParams, generate_catalog, requirements_met, tokens
from campflow.errors import ToolError

MAX_QUERY_CHARS = 200
PAGE_SIZE = 5


class SearchArgs(ToolArgs):
    """Arguments of search."""

    query: str = Field(description="keywords, at most 200 characters")
    page: int = Field(1, description="result page, 1 for the first five results")


class ProductArgs(ToolArgs):
    """Arguments of view."""

    product_id: str = Field(description="a product id from the search results, such as B12345")


class CartArgs(ToolArgs):
    """Arguments of add_to_cart."""

    product_id: str = Field(description="the product to buy")
    options: dict[str, str] = Field(
        default_factory=dict, description='one value for each option the product offers, e.g. {"color": "black"}'
    )


@dataclass
class ShopState(State):
    """The cart, what was seen, and the catalog indexed for this episode."""

    cart: dict[str, Any] | None = None
    viewed: list[str] = field(default_factory=list)
    last_query: str | None = None
    last_page: int = 0
    last_results: list[str] = field(default_factory=list)
    products: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)
    keywords: dict[str, frozenset[str]] = field(default_factory=dict, compare=False, repr=False)


class Shop(Bootcamp[ShopParams, ShopState]):
    """Buy the product a shopper asks for in an online shop.

    `search` the catalog by keywords (five results a page), `view` a product to see its features,
    options and price, then `add_to_cart` the right product with one value for each option it offers
    (the cart holds one product; adding another replaces it) and `checkout`. Buy a product of the
    kind asked for that has every feature named, offers the named options, and costs less than the
    price named.

    Levels grow the catalog, the number of required features and options, add a price limit, and add
    near misses: products of the wanted kind that lack one feature, do not offer a named option, or
    cost too much. Reward is 1 when every requirement holds; otherwise half the share of requirements
    met (0 for another kind of product or an empty cart). Reasons: `empty_cart`, `no_checkout`, `wrong_category`,
    `missing_attribute`, `wrong_option`, `over_budget`.
    """

    name = "shop"
    version = "1"
    # a page number walks through the pages the tool reported ("Page 1 of N"); the tool refuses others
    grounding = Exemptions(fields=frozenset({("search", "page")}))
    params_model = ShopParams
    state_model = ShopState
    # A near miss bought with the right options meets all but one requirement, and a miss earns
    # half the share met, so a wrong purchase earns less than 0.5.
    wrong_answer_bound = 0.5
    levels = {
        1: ShopParams(level=1, products=10, near_misses=1, attributes=1, options=1),
        2: ShopParams(level=2, products=30, near_misses=3, attributes=2, options=1, price_limit=True),
        3: ShopParams(level=3, products=60, near_misses=5, attributes=2, options=2, price_limit=True),
        4: ShopParams(level=4, products=80, near_misses=8, attributes=3, options=2, price_limit=True),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: ShopParams, rng: random.Random) -> dict[str, Any]:
        return generate_catalog(params, rng)

    def prompt(self, instance: Instance[ShopParams]) -> list[dict[str, Any]]:
        return self.chat(f"{instance.data['text']} Please buy it for me.")

    def new_state(self, instance: Instance[ShopParams]) -> ShopState:
        products = {p["id"]: p for p in instance.data["products"]}
        keywords = {
            pid: tokens(p["title"]).union(tokens(p["category"]), *map(tokens, p["attributes"]))
            for pid, p in products.items()
        }
        return ShopState(products=products, keywords=keywords)

    def max_turns(self, instance: Instance[ShopParams]) -> int:
        return 12 + instance.params.products // PAGE_SIZE

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def search(self, instance: Instance, state: ShopState, args: SearchArgs) -> Observation:
        """Search the catalog by keywords; results are ranked by how many keywords match."""
        query = args.query.strip()
        if not query or len(query) > MAX_QUERY_CHARS:
            raise ToolError(f"query is {len(query)} characters long; expected 1 to {MAX_QUERY_CHARS}")
        words = tokens(query)
        if not words:
            raise ToolError(f"query {query!r} has no words to search for; expected keywords such as 'backpack'")
        hits = [(len(words & kw), i, pid) for i, (pid, kw) in enumerate(state.keywords.items()) if words & kw]
        hits.sort(key=lambda h: (-h[0], h[1]))
        pages = max(1, -(-len(hits) // PAGE_SIZE))
        if not 1 <= args.page <= pages:
            raise ToolError(f"page {args.page} is out of range; expected 1 to {pages} for this query")
        shown = [pid for _, _, pid in hits[(args.page - 1) * PAGE_SIZE : args.page * PAGE_SIZE]]
        state.last_query, state.last_page, state.last_results = query, args.page, shown
        if not shown:
            return Observation(f"No products match {query!r}.")
        lines = [f"[{pid}] {state.products[pid]['title']}  ${state.products[pid]['price']:.2f}" for pid in shown]
        return Observation(f"Page {args.page} of {pages} ({len(hits)} results) for {query!r}:\n" + "\n".join(lines))

    @tool
    def view(self, instance: Instance, state: ShopState, args: ProductArgs) -> Observation:
        """Show a product's features, options and price."""
        p = _product(state, args.product_id)
        if p["id"] not in state.viewed:
            state.viewed.append(p["id"])
        options = "; ".join(f"{d}: {', '.join(v)}" for d, v in p["options"].items())
        return Observation(
            f"[{p['id']}] {p['title']}\nPrice: ${p['price']:.2f}\nKind: {p['category']}\n"
            f"Features: {', '.join(p['attributes'])}\nOptions: {options}"
        )

    @tool
    def add_to_cart(self, instance: Instance, state: ShopState, args: CartArgs) -> Observation:
        """Put a product in the cart with one value for each of its options (replaces what is there)."""
        p = _product(state, args.product_id)
        given = {k.strip().lower(): v for k, v in args.options.items()}
        unknown = sorted(set(given) - set(p["options"]))
        if unknown:
            raise ToolError(f"{p['id']} has no option {unknown[0][:40]!r}; expected options: {', '.join(p['options'])}")
        chosen: dict[str, str] = {}
        for dim, values in p["options"].items():
            if dim not in given:
                raise ToolError(f"choose a {dim} for {p['id']}: one of {', '.join(values)}")
            value = next((v for v in values if v.lower() == given[dim].strip().lower()), None)
            if value is None:
                shown = clip(given[dim], 40)
                raise ToolError(f"{p['id']} does not come in {dim} {shown!r}; expected one of {', '.join(values)}")
            chosen[dim] = value
        replaced = state.cart is not None
        state.cart = {"product_id": p["id"], "options": chosen}
        opts = ", ".join(f"{d} {v}" for d, v in chosen.items())
        return Observation(
            f"{'Replaced the cart with' if replaced else 'Added'} {p['title']} ({opts}), ${p['price']:.2f}."
        )

    @tool(final=True)
    def checkout(self, instance: Instance, state: ShopState, args: NoArgs) -> Observation:
        """Buy what is in the cart. This ends the episode."""
        state.answer = dict(state.cart) if state.cart else None
        if state.cart is None:
            return Observation("The cart is empty; nothing was bought.", final=True)
        return Observation(f"Bought {state.products[state.cart['product_id']]['title']}.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: ShopState, transcript: Any) -> Score:
        goal, cart = instance.data["goal"], state.cart
        if cart is None or state.answer is None:
            return Score(0.0, False, {"reason": "empty_cart" if cart is None else "no_checkout"})
        product = state.products[cart["product_id"]]
        details: dict[str, Any] = {"bought": product["id"], "target": instance.data["target"]}
        if product["category"] != goal["category"]:
            return Score(0.0, False, {**details, "reason": "wrong_category"})
        reqs = requirements_met(goal, product, cart["options"])
        missed = [name for name, ok in reqs if not ok]
        if not missed:
            return Score(1.0, True, details)
        reason = {"attribute": "missing_attribute", "option": "wrong_option"}.get(
            missed[0].split(":")[0], "over_budget"
        )
        reward = 0.5 * (len(reqs) - len(missed)) / len(reqs)
        return Score(round(reward, 6), False, {**details, "reason": reason, "missed": missed})

    # -- oracle ----------------------------------------------------------------------------------

    def oracle(self, instance: Instance, state: ShopState) -> Action:
        d = instance.data
        target, goal = d["target"], d["goal"]
        if state.cart is not None and self._meets_goal(instance, state, state.cart):
            return Action("checkout", {})
        if target not in state.viewed:
            if target in state.last_results:
                return Action("view", {"product_id": target})
            query = " ".join([*goal["attributes"], goal["category"]])
            page = state.last_page + 1 if state.last_query == query else 1
            return Action("search", {"query": query, "page": page})
        return Action("add_to_cart", {"product_id": target, "options": _options_for(state.products[target], goal)})

    def demonstrate(self, instance: Instance, state: ShopState, transcript: Sequence[Mapping[str, Any]]) -> Action:
        """The oracle searches with the prompt's words and buys with the options a view showed, but
        picks the target out of the results unseen; the demonstration views the results ranked above
        it first, so the one it buys is the first whose page shows it fits."""
        action = self.oracle(instance, state)
        if action.name == "view":
            ahead = state.last_results[: state.last_results.index(action.arguments["product_id"])]
            unseen = next((pid for pid in ahead if pid not in state.viewed), None)
            if unseen is not None:
                return Action("view", {"product_id": unseen})
        return action

    def perturb(self, instance: Instance, state: ShopState, action: Action, rng: random.Random) -> Action:
        d = instance.data
        if action.name == "search":
            words = action.arguments["query"].split()
            return Action("search", {"query": " ".join(words[1:]) or "sale", "page": 1})
        if action.name == "view":
            return Action("view", {"product_id": rng.choice(d["near_misses"])})
        if action.name == "add_to_cart":
            opts = dict(action.arguments["options"])
            product = state.products[action.arguments["product_id"]]
            dims = [k for k, vals in product["options"].items() if len(vals) > 1]
            if not dims:
                return self._near_miss_purchase(instance, state, rng)
            dim = rng.choice(dims)
            opts[dim] = rng.choice([v for v in product["options"][dim] if v != opts[dim]])
            return Action("add_to_cart", {"product_id": product["id"], "options": opts})
        return action

    def wrong_answer(self, instance: Instance, state: ShopState, rng: random.Random) -> Action:
        # Checkout is the only final action, so a wrong purchase is a near miss put in the cart, then
        # bought.
        if state.cart is not None and state.cart["product_id"] in instance.data["near_misses"]:
            return Action("checkout", {})
        return self._near_miss_purchase(instance, state, rng)

    def _near_miss_purchase(self, instance: Instance, state: ShopState, rng: random.Random) -> Action:
        product = state.products[rng.choice(instance.data["near_misses"])]
        return Action(
            "add_to_cart", {"product_id": product["id"], "options": _options_for(product, instance.data["goal"])}
        )

    def _meets_goal(self, instance: Instance, state: ShopState, cart: dict[str, Any]) -> bool:
        product, goal = state.products[cart["product_id"]], instance.data["goal"]
        return product["category"] == goal["category"] and all(
            ok for _, ok in requirements_met(goal, product, cart["options"])
        )


def _product(state: ShopState, raw: str) -> dict[str, Any]:
    pid = raw.strip().upper()
    if pid not in state.products:
        shown = clip(raw, 40)
        raise ToolError(f"unknown product id {shown!r}; expected an id such as B12345 from the search results")
    return state.products[pid]


def _options_for(product: dict[str, Any], goal: dict[str, Any]) -> dict[str, str]:
    """The goal's option values where the product offers them, else its first value."""
    return {
        d: goal["options"][d] if goal["options"].get(d) in vals else vals[0] for d, vals in product["options"].items()
    }
