"""The generated shop database of the ``sql`` bootcamp and its questions, each with gold SQL and answer.

Answers are computed here in plain Python from the generated rows (prices in integer cents, so sums
are exact; averages are kept unrounded, and the score accepts either rounding of a half-cent tie);
``tests/test_text_bootcamps.py`` checks that every gold query returns the same answer.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import Params
from campflow.errors import InvalidParamsError

FIRST = (
    "Ada",
    "Ben",
    "Chen",
    "Dara",
    "Eli",
    "Fay",
    "Gus",
    "Hana",
    "Ivo",
    "June",
    "Kai",
    "Lena",
    "Milo",
    "Nia",
    "Omar",
    "Pia",
    "Quinn",
    "Rosa",
    "Sami",
    "Tess",
    "Uma",
    "Vik",
    "Wren",
    "Yara",
    "Zane",
)
LAST = (
    "Abbott",
    "Brooks",
    "Castro",
    "Diaz",
    "Evans",
    "Fischer",
    "Garcia",
    "Hughes",
    "Ito",
    "Jensen",
    "Khan",
    "Lopez",
    "Moreau",
    "Novak",
    "Okafor",
    "Patel",
    "Quist",
    "Rossi",
    "Silva",
    "Tanaka",
)
CITIES = ("Lisbon", "Oslo", "Denver", "Osaka", "Nairobi", "Lima", "Perth", "Quebec", "Tunis", "Malmo")
CATEGORIES: dict[str, tuple[str, ...]] = {
    "kitchen": ("Kettle", "Toaster", "Blender", "Skillet", "Grinder", "Juicer"),
    "garden": ("Hose", "Rake", "Shovel", "Planter", "Sprinkler", "Trowel"),
    "office": ("Stapler", "Lamp", "Notebook", "Monitor", "Keyboard", "Chair"),
    "toys": ("Puzzle", "Kite", "Robot", "Yo-yo", "Train Set", "Drone"),
    "sports": ("Racket", "Helmet", "Ball", "Jump Rope", "Yoga Mat", "Bike Pump"),
}
ADJECTIVES = ("Classic", "Compact", "Deluxe", "Eco", "Smart", "Mini", "Pro", "Rustic", "Solar", "Turbo")
STATUSES = ("delivered", "shipped", "cancelled")
YEARS = (2021, 2022, 2023, 2024)
COUNTRIES = ("Chile", "Ghana", "Japan", "Norway", "Peru", "Spain")
DEPARTMENTS = ("sales", "support", "warehouse", "finance")

SCHEMAS: dict[str, list[tuple[str, str]]] = {
    "customers": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("city", "TEXT"), ("joined", "INTEGER")],
    "products": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("category", "TEXT"), ("price", "REAL")],
    "orders": [("id", "INTEGER PRIMARY KEY"), ("customer_id", "INTEGER"), ("year", "INTEGER"), ("status", "TEXT")],
    "order_items": [("order_id", "INTEGER"), ("product_id", "INTEGER"), ("quantity", "INTEGER")],
    "suppliers": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("country", "TEXT")],
    "employees": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT"), ("department", "TEXT"), ("salary", "INTEGER")],
}
SPEND = "SUM(oi.quantity * p.price)"
MAX_DRAWS = 50


class SqlParams(Params):
    """Knobs of a SQL question."""

    customers: int = Field(10, ge=5, le=80, description="rows in the customers table")
    products: int = Field(8, ge=5, le=60, description="rows in the products table")
    orders: int = Field(15, ge=5, le=200, description="rows in the orders table (1-3 order items each)")
    joins: int = Field(0, ge=0, le=3, description="JOIN clauses the gold query needs")
    aggregate: bool = Field(False, description="the question needs grouping or aggregation (AVG, SUM, top-1)")
    distractor_tables: int = Field(0, ge=0, le=2, description="extra tables the question never needs")


def generate_database(p: SqlParams, rng: random.Random) -> dict[str, list[list[Any]]]:
    """Rows of every table for params ``p``: customers, products, orders, items, distractors."""
    draw = rng.random  # int(draw() * n) instead of randint/choice: the same determinism, a third the time
    people = [
        f"{FIRST[i // len(LAST)]} {LAST[i % len(LAST)]}"
        for i in rng.sample(range(len(FIRST) * len(LAST)), p.customers + 8)
    ]
    cities = rng.sample(CITIES, min(len(CITIES), max(2, p.customers // 4)))
    customers = [
        [i + 1, people[i], cities[int(draw() * len(cities))], YEARS[int(draw() * len(YEARS))]]
        for i in range(p.customers)
    ]
    kinds = [(c, a, n) for c, nouns in CATEGORIES.items() for a in ADJECTIVES for n in nouns]
    products = [
        [i + 1, f"{kinds[k][1]} {kinds[k][2]}", kinds[k][0], (199 + int(draw() * 19801)) / 100]
        for i, k in enumerate(rng.sample(range(len(kinds)), p.products))
    ]
    orders, items = [], []
    for oid in range(1, p.orders + 1):
        r = draw()
        status = STATUSES[0] if r < 0.55 else STATUSES[1] if r < 0.8 else STATUSES[2]
        orders.append([oid, 1 + int(draw() * p.customers), YEARS[int(draw() * len(YEARS))], status])
        chosen: list[int] = []
        for _ in range(1 + int(draw() * 3)):
            pid = 1 + int(draw() * p.products)
            if pid not in chosen:  # a repeated product is dropped, not redrawn: 1-3 distinct lines
                chosen.append(pid)
                items.append([oid, pid, 1 + int(draw() * 5)])
    tables = {"customers": customers, "products": products, "orders": orders, "order_items": items}
    if p.distractor_tables >= 1:
        tables["suppliers"] = [
            [
                i + 1,
                f"{LAST[int(draw() * len(LAST))]} {('Ltd', 'Co', 'Supply')[i % 3]}",
                COUNTRIES[int(draw() * len(COUNTRIES))],
            ]
            for i in range(6)
        ]
    if p.distractor_tables >= 2:
        tables["employees"] = [
            [
                i + 1,
                people[p.customers + i],
                DEPARTMENTS[int(draw() * len(DEPARTMENTS))],
                (30 + int(draw() * 61)) * 1000,
            ]
            for i in range(8)
        ]
    return tables


class _View:
    """Indexed Python view of the rows that the question templates compute answers from."""

    def __init__(self, t: dict[str, list[list[Any]]]) -> None:
        self.customers = t["customers"]
        self.products = t["products"]
        self.orders = t["orders"]
        self.cust = {c[0]: c for c in self.customers}
        self.prod = {p[0]: p for p in self.products}
        self.order = {o[0]: o for o in self.orders}
        # (order, customer, product, quantity, cents) per item line: the join every spend question sums
        self.lines = [
            (self.order[oid], self.cust[self.order[oid][1]], self.prod[pid], q, round(self.prod[pid][3] * 100))
            for oid, pid, q in t["order_items"]
        ]
        self.cities = sorted({c[2] for c in self.customers})
        self.categories = sorted({p[2] for p in self.products})

    def paid(self) -> list[tuple[Any, ...]]:
        return [x for x in self.lines if x[0][3] != "cancelled"]


def _q(text: str, sql: str, kind: str, answer: Any, wrong_sql: str) -> dict[str, Any]:
    return {"text": text, "sql": sql, "kind": kind, "answer": answer, "wrong_sql": wrong_sql}


def _unique_top(counts: dict[str, int]) -> str | None:
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])
    if not ranked or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
        return None  # a tie has no single right answer
    return ranked[0][0]


def _names(found: set[str], universe: list[list[Any]]) -> list[str] | None:
    # An empty or all-inclusive list would make "list everything" (or nothing) a right answer.
    return sorted(found) if 0 < len(found) < len(universe) else None


def _count_city(v: _View, rng: random.Random) -> dict[str, Any] | None:
    city, other = rng.sample(v.cities, 2)
    n = sum(1 for c in v.customers if c[2] == city)
    sql = "SELECT COUNT(*) FROM customers WHERE city = '{}'"
    return _q(f"How many customers live in {city}?", sql.format(city), "number", n, sql.format(other))


def _cheap_products(v: _View, rng: random.Random) -> dict[str, Any] | None:
    cat = rng.choice(v.categories)
    limit = rng.choice([10, 25, 50, 75, 100, 150])
    found = _names({p[1] for p in v.products if p[2] == cat and p[3] < limit}, v.products)
    sql = f"SELECT name FROM products WHERE category = '{cat}' AND price < {{}}"
    return found and _q(
        f"List the names of the {cat} products that cost less than {limit}.",
        sql.format(limit),
        "names",
        found,
        sql.format(limit * 2),
    )


def _count_status(v: _View, rng: random.Random) -> dict[str, Any] | None:
    status, other = rng.sample(STATUSES, 2)
    n = sum(1 for o in v.orders if o[3] == status)
    sql = "SELECT COUNT(*) FROM orders WHERE status = '{}'"
    return n and _q(f"How many orders have the status '{status}'?", sql.format(status), "number", n, sql.format(other))


def _avg_price(v: _View, rng: random.Random) -> dict[str, Any] | None:
    cat = rng.choice(v.categories)
    cents = [round(p[3] * 100) for p in v.products if p[2] == cat]
    sql = "SELECT ROUND(AVG(price), 2) FROM products WHERE category = '{}'"
    return _q(
        f"What is the average price of the {cat} products, rounded to 2 decimals?",
        sql.format(cat),
        "number",
        sum(cents) / len(cents) / 100,
        sql.format(cat).replace("AVG", "MAX"),
    )


def _priciest(v: _View, rng: random.Random) -> dict[str, Any] | None:
    cat = rng.choice(v.categories)
    top = _unique_top({p[1]: round(p[3] * 100) for p in v.products if p[2] == cat})
    sql = f"SELECT name FROM products WHERE category = '{cat}' ORDER BY price {{}} LIMIT 1"
    return top and _q(f"Which {cat} product is the most expensive?", sql.format("DESC"), "name", top, sql.format("ASC"))


def _top_city(v: _View, rng: random.Random) -> dict[str, Any] | None:
    top = _unique_top(Counter(c[2] for c in v.customers))
    sql = "SELECT city FROM customers GROUP BY city ORDER BY COUNT(*) {} LIMIT 1"
    return top and _q("Which city has the most customers?", sql.format("DESC"), "name", top, sql.format("ASC"))


def _buyers_with_status(v: _View, rng: random.Random) -> dict[str, Any] | None:
    status, other = rng.sample(STATUSES, 2)
    found = _names({v.cust[o[1]][1] for o in v.orders if o[3] == status}, v.customers)
    sql = "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id WHERE o.status = '{}'"
    return found and _q(
        f"List the names of the customers who have an order with the status '{status}'.",
        sql.format(status),
        "names",
        found,
        sql.format(other),
    )


def _orders_from_city(v: _View, rng: random.Random) -> dict[str, Any] | None:
    city, other = rng.sample(v.cities, 2)
    n = sum(1 for o in v.orders if v.cust[o[1]][2] == city)
    sql = "SELECT COUNT(*) FROM orders o JOIN customers c ON c.id = o.customer_id WHERE c.city = '{}'"
    return n and _q(
        f"How many orders were placed by customers who live in {city}?",
        sql.format(city),
        "number",
        n,
        sql.format(other),
    )


def _top_customer(v: _View, rng: random.Random) -> dict[str, Any] | None:
    top = _unique_top(Counter(v.cust[o[1]][1] for o in v.orders))
    sql = (
        "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
        "GROUP BY c.id ORDER BY COUNT(*) {} LIMIT 1"
    )
    return top and _q("Which customer has placed the most orders?", sql.format("DESC"), "name", top, sql.format("ASC"))


def _quantity_of_product(v: _View, rng: random.Random) -> dict[str, Any] | None:
    prod = rng.choice(v.products)
    n = sum(q for _, _, p, q, _ in v.lines if p[0] == prod[0])
    sql = "SELECT SUM(oi.quantity) FROM order_items oi JOIN products p ON p.id = oi.product_id WHERE p.name = '{}'"
    return n and _q(
        f"How many units of the product '{prod[1]}' were ordered in total, over all orders?",
        sql.format(prod[1]),
        "number",
        n,
        sql.format(prod[1]).replace("SUM(oi.quantity)", "COUNT(*)"),
    )


def _revenue_in_year(v: _View, rng: random.Random) -> dict[str, Any] | None:
    year = rng.choice(YEARS)
    cents = sum(q * c for o, _, _, q, c in v.paid() if o[2] == year)
    sql = (
        f"SELECT ROUND({SPEND}, 2) FROM orders o JOIN order_items oi ON oi.order_id = o.id "
        f"JOIN products p ON p.id = oi.product_id WHERE o.year = {year}{{}}"
    )
    return cents and _q(
        f"What was the revenue (quantity times price) of the orders placed in {year}, leaving "
        "out cancelled orders? Round to 2 decimals.",
        sql.format(" AND o.status != 'cancelled'"),
        "number",
        round(cents / 100, 2),
        sql.format(""),
    )


def _units_to_city(v: _View, rng: random.Random) -> dict[str, Any] | None:
    city, other = rng.sample(v.cities, 2)
    n = sum(q for _, c, _, q, _ in v.lines if c[2] == city)
    sql = (
        "SELECT SUM(oi.quantity) FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN order_items oi ON oi.order_id = o.id WHERE c.city = '{}'"
    )
    return n and _q(
        f"How many units in total (sum of quantities, all orders) did customers from {city} order?",
        sql.format(city),
        "number",
        n,
        sql.format(other),
    )


def _products_in_year(v: _View, rng: random.Random) -> dict[str, Any] | None:
    year, other = rng.sample(YEARS, 2)
    found = _names({p[1] for o, _, p, _, _ in v.lines if o[2] == year}, v.products)
    sql = (
        "SELECT DISTINCT p.name FROM orders o JOIN order_items oi ON oi.order_id = o.id "
        "JOIN products p ON p.id = oi.product_id WHERE o.year = {}"
    )
    return found and _q(
        f"List the names of the products that appear in orders placed in {year}.",
        sql.format(year),
        "names",
        found,
        sql.format(other),
    )


def _top_city_for_category(v: _View, rng: random.Random) -> dict[str, Any] | None:
    cat = rng.choice(v.categories)
    spend: Counter[str] = Counter()
    for _, c, p, q, cents in v.paid():
        if p[2] == cat:
            spend[c[2]] += q * cents
    top = _unique_top(spend)
    sql = (
        f"SELECT c.city FROM customers c JOIN orders o ON o.customer_id = c.id "
        f"JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id "
        f"WHERE p.category = '{cat}'{{}} GROUP BY c.city ORDER BY {SPEND} DESC LIMIT 1"
    )
    return top and _q(
        f"Customers of which city spent the most (quantity times price) on {cat} products, "
        "leaving out cancelled orders?",
        sql.format(" AND o.status != 'cancelled'"),
        "name",
        top,
        sql.format(""),
    )


def _city_spend_on_category(v: _View, rng: random.Random) -> dict[str, Any] | None:
    city, cat = rng.choice(v.cities), rng.choice(v.categories)
    cents = sum(q * c for _, cu, p, q, c in v.paid() if cu[2] == city and p[2] == cat)
    sql = (
        f"SELECT ROUND({SPEND}, 2) FROM customers c JOIN orders o ON o.customer_id = c.id "
        f"JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id "
        f"WHERE c.city = '{city}' AND p.category = '{cat}'{{}}"
    )
    return cents and _q(
        f"How much did customers from {city} spend (quantity times price) on {cat} products, "
        "leaving out cancelled orders? Round to 2 decimals.",
        sql.format(" AND o.status != 'cancelled'"),
        "number",
        round(cents / 100, 2),
        sql.format(""),
    )


def _buyers_of_category(v: _View, rng: random.Random) -> dict[str, Any] | None:
    cat, other = rng.sample(v.categories, 2)
    found = _names({c[1] for _, c, p, _, _ in v.lines if p[2] == cat}, v.customers)
    sql = (
        "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.id "
        "JOIN order_items oi ON oi.order_id = o.id JOIN products p ON p.id = oi.product_id "
        "WHERE p.category = '{}'"
    )
    return found and _q(
        f"List the names of the customers who ordered at least one {cat} product.",
        sql.format(cat),
        "names",
        found,
        sql.format(other),
    )


Template = Callable[[_View, random.Random], "dict[str, Any] | None"]
# (joins, aggregate) -> templates: JOIN clauses in the gold query, and whether it groups or aggregates
TEMPLATES: dict[tuple[int, bool], list[Template]] = {
    (0, False): [_count_city, _cheap_products, _count_status],
    (0, True): [_avg_price, _priciest, _top_city],
    (1, False): [_buyers_with_status, _orders_from_city],
    (1, True): [_top_customer, _quantity_of_product],
    (2, False): [_products_in_year, _units_to_city],
    (2, True): [_revenue_in_year],
    (3, False): [_buyers_of_category],
    (3, True): [_top_city_for_category, _city_spend_on_category],
}


def generate_question(p: SqlParams, rng: random.Random) -> tuple[dict[str, list[list[Any]]], dict[str, Any]]:
    """A database and one question about it with a unique, non-trivial answer."""
    templates = TEMPLATES[(p.joins, p.aggregate)]
    for _ in range(MAX_DRAWS):  # each round draws fresh data; most rounds accept the first question
        tables = generate_database(p, rng)
        view = _View(tables)
        if len(view.cities) < 2 or len(view.categories) < 2:
            continue
        for _ in range(20):
            question = rng.choice(templates)(view, rng)
            if question:
                return tables, question
    raise InvalidParamsError(
        f"sql: no database in {MAX_DRAWS} draws had a question with a single answer; "
        "expected more customers, products or orders"
    )


def entity_names(tables: dict[str, list[list[Any]]], question: dict[str, Any]) -> list[str]:
    """Names of the same kind as the answer (customers, products or cities), for wrong answers."""
    answer = question["answer"]
    first = answer[0] if isinstance(answer, list) else answer
    for table, col in (("customers", 1), ("products", 1), ("customers", 2)):
        values = sorted({row[col] for row in tables[table]})
        if first in values:
            return values
    raise ValueError(f"answer {first!r} is not a customer, product or city")
