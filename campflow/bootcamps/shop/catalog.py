"""The generated product catalog of the ``shop`` bootcamp: products, a shopper's goal and near misses."""

from __future__ import annotations

import functools
import math
import random
import re
from typing import Any

from pydantic import Field, model_validator

from campflow.bootcamps.base import Params

# category -> (attributes a product may have, option dimensions -> values)
CATEGORIES: dict[str, tuple[tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "t-shirt": (
        ("organic cotton", "v-neck", "long sleeve", "moisture wicking", "machine washable", "pocket"),
        {"size": ("XS", "S", "M", "L", "XL"), "color": ("black", "white", "navy", "red", "olive")},
    ),
    "running shoes": (
        ("lightweight", "waterproof", "breathable mesh", "wide fit", "arch support", "non-slip"),
        {"size": ("7", "8", "9", "10", "11", "12"), "color": ("black", "white", "blue", "grey")},
    ),
    "backpack": (
        ("waterproof", "laptop sleeve", "anti-theft", "usb charging port", "lightweight", "padded straps"),
        {"capacity": ("20L", "30L", "40L"), "color": ("black", "grey", "green", "navy")},
    ),
    "headphones": (
        ("wireless", "noise cancelling", "over-ear", "built-in microphone", "foldable", "long battery life"),
        {"color": ("black", "white", "silver", "rose gold"), "cable": ("usb-c", "3.5mm", "none")},
    ),
    "coffee maker": (
        ("programmable", "stainless steel", "thermal carafe", "single serve", "auto shut-off", "built-in grinder"),
        {"capacity": ("4 cups", "8 cups", "12 cups"), "color": ("black", "silver", "red")},
    ),
    "desk lamp": (
        ("dimmable", "usb charging port", "adjustable arm", "warm light", "touch control", "clamp mount"),
        {"color": ("black", "white", "brass"), "bulb": ("led", "halogen")},
    ),
    "yoga mat": (
        ("non-slip", "extra thick", "eco-friendly", "carrying strap", "sweat resistant", "reversible"),
        {"thickness": ("4mm", "6mm", "8mm"), "color": ("purple", "teal", "black", "pink")},
    ),
    "water bottle": (
        ("insulated", "leak-proof", "bpa-free", "stainless steel", "wide mouth", "straw lid"),
        {"capacity": ("500ml", "750ml", "1L"), "color": ("blue", "black", "white", "orange")},
    ),
}
BRANDS = ("Acme", "Northwind", "Zephyr", "Lumo", "Kestrel", "Orbit", "Tandem", "Vireo", "Halcyon", "Brio")
_TOKEN = re.compile(r"[a-z0-9]+")


class ShopParams(Params):
    """Knobs of a shopping task."""

    products: int = Field(10, ge=5, le=200, description="products in the catalog")
    near_misses: int = Field(1, ge=1, le=10, description="products of the wanted kind that miss one requirement")
    attributes: int = Field(1, ge=1, le=3, description="features the wanted product must have")
    options: int = Field(1, ge=0, le=2, description="options (size, color, ...) the shopper names")
    price_limit: bool = Field(False, description="the shopper names a price the product must stay under")

    @model_validator(mode="after")
    def _room_for_near_misses(self) -> ShopParams:
        if self.products < self.near_misses + 2:
            raise ValueError(
                f"products ({self.products}) must be at least near_misses + 2 "
                f"({self.near_misses + 2}): the target, the near misses and another kind"
            )
        return self


@functools.lru_cache(maxsize=8192)  # titles repeat across catalogs: brand x features x kind
def tokens(text: str) -> frozenset[str]:
    """The lowercase words and numbers of ``text``, as search matches them."""
    return frozenset(_TOKEN.findall(text.lower()))


def _product(
    rng: random.Random, pid: str, category: str, attrs: list[str], options: dict[str, list[str]], price: float
) -> dict[str, Any]:
    pool = CATEGORIES[category][0]
    ordered = [a for a in pool if a in attrs]  # a stable order keeps titles deterministic
    brand = BRANDS[int(rng.random() * len(BRANDS))]
    title = f"{brand} {' '.join(a.title() for a in ordered[:2])} {category.title()}"
    return {"id": pid, "title": title, "category": category, "attributes": ordered, "options": options, "price": price}


def _random_product(rng: random.Random, pid: str, category: str) -> dict[str, Any]:
    # Filler products are most of a large catalog: coin flips per value cost a fraction of rng.sample.
    draw = rng.random
    pool, dims = CATEGORIES[category]
    attrs = [a for a in pool if draw() < 0.4] or [pool[int(draw() * len(pool))]]
    options = {d: [v for v in vals if draw() < 0.6] or [vals[int(draw() * len(vals))]] for d, vals in dims.items()}
    return _product(rng, pid, category, attrs, options, round(8 + draw() * 172, 2))


def generate_catalog(p: ShopParams, rng: random.Random) -> dict[str, Any]:
    """A catalog for params ``p`` with one product meeting the goal and ``p.near_misses`` that miss by one."""
    ids = [f"B{n:05d}" for n in rng.sample(range(10_000, 100_000), p.products)]
    category = rng.choice(sorted(CATEGORIES))
    pool, dims = CATEGORIES[category]
    want_attrs = rng.sample(pool, p.attributes)
    want_dims = rng.sample(sorted(dims), p.options)
    want_options = {d: rng.choice(dims[d]) for d in want_dims}
    target_price = round(rng.uniform(15, 150), 2)
    # strictly above the target's price, a round number as a shopper would say it
    max_price = float(math.floor(target_price / 10) * 10 + rng.choice([10, 20, 30])) if p.price_limit else None

    def offered(dim: str, must: str | None, avoid: str | None) -> list[str]:
        values = [v for v in dims[dim] if v != avoid]
        chosen = set(rng.sample(values, rng.randint(1, len(values))))
        if must is not None:
            chosen.add(must)
        return [v for v in dims[dim] if v in chosen]

    def matching(
        attrs_missing: str | None = None, option_missing: str | None = None, price: float | None = None
    ) -> tuple[list[str], dict[str, list[str]], float]:
        extra = [a for a in pool if a not in want_attrs and a != attrs_missing]
        attrs = [a for a in want_attrs if a != attrs_missing] + rng.sample(extra, rng.randint(0, 1))
        options = {
            d: offered(
                d,
                None if d == option_missing else want_options.get(d),
                want_options.get(d) if d == option_missing else None,
            )
            for d in sorted(dims)
        }
        return (
            attrs,
            options,
            price
            if price is not None
            else round(rng.uniform(5, max_price - 0.01) if max_price else rng.uniform(8, 180), 2),
        )

    products = []
    t_attrs, t_opts, _ = matching()
    products.append(_product(rng, ids[0], category, t_attrs, t_opts, target_price))
    kinds = ["attribute"] * len(want_attrs) + ["option"] * len(want_dims) + (["price"] if max_price else [])
    near = []
    for i in range(p.near_misses):
        kind = kinds[i % len(kinds)] if i < len(kinds) else rng.choice(kinds)
        if kind == "attribute":
            attrs, opts, price = matching(attrs_missing=rng.choice(want_attrs))
        elif kind == "option":
            attrs, opts, price = matching(option_missing=rng.choice(want_dims))
        else:
            assert max_price is not None
            attrs, opts, price = matching(price=round(max_price + rng.uniform(1, 40), 2))
        products.append(_product(rng, ids[1 + i], category, attrs, opts, price))
        near.append(ids[1 + i])
    others = [c for c in sorted(CATEGORIES) if c != category]
    for pid in ids[1 + p.near_misses :]:
        products.append(_random_product(rng, pid, others[int(rng.random() * len(others))]))
    rng.shuffle(products)
    goal = {"category": category, "attributes": want_attrs, "options": want_options, "max_price": max_price}
    return {"products": products, "goal": goal, "target": ids[0], "near_misses": near, "text": _goal_text(goal)}


def _goal_text(goal: dict[str, Any]) -> str:
    attrs, kind = goal["attributes"], goal["category"]
    wanted = kind if kind.endswith("s") else f"a {kind}"
    listed = " and ".join(attrs) if len(attrs) <= 2 else f"{', '.join(attrs[:-1])} and {attrs[-1]}"
    text = f"I'm looking for {wanted} with {'this feature' if len(attrs) == 1 else 'these features'}: {listed}"
    if goal["options"]:
        text += ", with " + " and ".join(f"{d} {v}" for d, v in goal["options"].items())
    if goal["max_price"] is not None:
        text += f", priced under ${goal['max_price']:.0f}"
    return text + "."


def requirements_met(goal: dict[str, Any], product: dict[str, Any], chosen: dict[str, str]) -> list[tuple[str, bool]]:
    """Each requirement of ``goal`` (attributes, then options, then price) and whether a purchase meets it."""
    out = [(f"attribute:{a}", a in product["attributes"]) for a in goal["attributes"]]
    out += [(f"option:{d}", chosen.get(d) == v) for d, v in goal["options"].items()]
    if goal["max_price"] is not None:
        out.append(("price", product["price"] < goal["max_price"]))
    return out
