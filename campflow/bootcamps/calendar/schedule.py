"""The world of the ``calendar`` bootcamp: people, events, scheduling requests, their checks and a planner.

Times are minutes after midnight on a 30-minute grid for generated events; the agent may use any
quarter hour. Events are plain dicts (``id``, ``title``, ``attendees``, ``day``, ``start``, ``end``) so
that an instance's identity is JSON. One set of functions serves the tools, the score and the oracle,
so all three agree on what "free", "inside working hours" and "done" mean.
"""

from __future__ import annotations

import functools
import random
from typing import Any

from pydantic import Field, model_validator

from campflow.bootcamps.base import Params
from campflow.errors import InvalidParamsError

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri")
NAMES = ("Ana", "Bo", "Cy", "Dee", "Eli", "Fen", "Gil", "Hal")
TOPICS = (
    "Budget",
    "Hiring",
    "Roadmap",
    "Design",
    "Launch",
    "Security",
    "Pricing",
    "Support",
    "Data",
    "Vendor",
    "Training",
    "Quarterly",
)
KINDS = ("review", "sync", "planning", "workshop", "check-in", "retro")
WINDOWS = {"morning": (0, 12 * 60), "afternoon": (13 * 60, 24 * 60)}
WINDOW_TEXT = {"morning": "ending by 12:00", "afternoon": "starting at 13:00 or later"}
GRID = 30
MAX_DRAWS = 50
Event = dict[str, Any]


class CalendarParams(Params):
    """Knobs of a scheduling task."""

    people: int = Field(3, ge=2, le=len(NAMES), description="people on the calendar")
    days: int = Field(1, ge=1, le=len(DAYS), description="work days on the calendar, from Monday")
    busy: int = Field(2, ge=0, le=6, description="existing events: busy x people / 2 placements tried per day")
    creates: int = Field(1, ge=0, le=3, description="meetings to schedule in a free slot")
    moves: int = Field(0, ge=0, le=2, description="events to move to another day")
    cancels: int = Field(0, ge=0, le=2, description="events to cancel")
    attendees: int = Field(2, ge=2, le=len(NAMES), description="people in each meeting to schedule")
    windows: bool = Field(False, description="meetings to schedule may be limited to the morning or afternoon")
    blocker: bool = Field(False, description="one meeting has a fixed time that only fits after moving a focus block")
    varied_hours: bool = Field(False, description="people keep different working hours (else all 09:00-17:00)")

    @model_validator(mode="after")
    def _consistent(self) -> CalendarParams:
        if self.attendees > self.people:
            raise ValueError(f"attendees ({self.attendees}) must not exceed people ({self.people})")
        if self.moves and self.days < 2:
            raise ValueError("moves need days >= 2: an event moves to another day")
        if self.creates + self.moves + self.cancels + int(self.blocker) == 0:
            raise ValueError("creates + moves + cancels + blocker must be at least 1; a task needs a request")
        return self


def fmt(minutes: int) -> str:
    """``540`` -> ``"09:00"``."""
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def describe(e: Event) -> str:
    """One event as list_events shows it."""
    return f"{e['id']} {e['day']} {fmt(e['start'])}-{fmt(e['end'])} {e['title']!r} ({', '.join(e['attendees'])})"


def conflicts(
    events: dict[str, Event], attendees: list[str], day: str, start: int, end: int, skip: str | None = None
) -> list[tuple[Event, str]]:
    """Events (with the attendee they share) that overlap ``[start, end)`` on ``day``."""
    return [
        (e, p)
        for e in events.values()
        if e["id"] != skip and e["day"] == day and e["start"] < end and start < e["end"]
        for p in attendees
        if p in e["attendees"]
    ]


def outside_hours(hours: dict[str, list[int]], attendees: list[str], start: int, end: int) -> list[str]:
    """Attendees whose working hours do not contain ``[start, end)``."""
    return [p for p in attendees if start < hours[p][0] or end > hours[p][1]]


def free_starts(
    data: dict[str, Any],
    events: dict[str, Event],
    attendees: list[str],
    day: str,
    duration: int,
    skip: str | None = None,
    window: str | None = None,
    step: int = GRID,
) -> list[int]:
    """Start times on ``day`` where every attendee is at work and free for ``duration`` minutes."""
    hours = data["people"]
    lo = max(hours[p][0] for p in attendees)
    hi = min(hours[p][1] for p in attendees)
    if window is not None:
        lo, hi = max(lo, WINDOWS[window][0]), min(hi, WINDOWS[window][1])
    busy = sorted(
        (e["start"], e["end"])
        for e in events.values()
        if e["id"] != skip and e["day"] == day and any(p in e["attendees"] for p in attendees)
    )
    out, t = [], -(-lo // step) * step
    while t + duration <= hi:
        if all(t + duration <= s or t >= f for s, f in busy):
            out.append(t)
        t += step
    return out


# ----------------------------------------------------------------------------------------------
# Checking the goal


def check(data: dict[str, Any], events: dict[str, Event]) -> tuple[str | None, dict[str, Any]]:
    """None when every request holds and nothing else changed, else a reason slug and details."""
    initial = {e["id"]: e for e in data["events"]}
    hours = data["people"]
    allowed = set()  # initial events the requests may change
    new = {i: e for i, e in events.items() if i not in initial}
    matched: set[str] = set()
    for r in data["requests"]:
        if r["kind"] == "cancel":
            allowed.add(r["id"])
            if r["id"] in events:
                return "not_cancelled", {"event": r["id"]}
        elif r["kind"] == "move":
            allowed.add(r["id"])
            e, was = events.get(r["id"]), initial[r["id"]]
            if e is None:
                return "move_target_missing", {"event": r["id"]}
            if e["day"] != r["day"]:
                return "not_moved", {"event": r["id"], "day": e["day"]}
            if e["end"] - e["start"] != was["end"] - was["start"] or e["attendees"] != was["attendees"]:
                return "changed_event", {"event": r["id"]}
            if outside_hours(hours, e["attendees"], e["start"], e["end"]):
                return "outside_hours", {"event": r["id"]}
        else:
            if r.get("movable"):
                allowed.add(r["movable"])
                m, was = events.get(r["movable"]), initial[r["movable"]]
                if m is None or m["day"] != was["day"] or m["end"] - m["start"] != was["end"] - was["start"]:
                    return "blocker_misplaced", {"event": r["movable"]}
                if outside_hours(hours, m["attendees"], m["start"], m["end"]):
                    return "outside_hours", {"event": r["movable"]}
            found = [e for e in new.values() if _norm(e["title"]) == _norm(r["title"]) and e["id"] not in matched]
            if not found:
                return "missing_event", {"title": r["title"]}
            e = found[0]
            matched.add(e["id"])
            reason = _create_problem(r, e, hours)
            if reason:
                return reason, {"event": e["id"], "title": r["title"]}
    extra = sorted(set(new) - matched)
    if extra:
        return "extra_event", {"events": extra}
    changed = sorted(
        i for i, e in initial.items() if i not in allowed and events.get(i) is not e and events.get(i) != e
    )
    if changed:
        return "changed_other", {"events": changed}
    agenda: dict[tuple[str, str], list[tuple[int, int, str]]] = {}
    for e in events.values():
        for p in e["attendees"]:
            agenda.setdefault((p, e["day"]), []).append((e["start"], e["end"], e["id"]))
    for (p, _), mine in sorted(agenda.items()):
        mine.sort()
        for a, b in zip(mine, mine[1:]):
            if b[0] < a[1]:  # sorted by start, so any overlap shows between neighbours
                return "overlap", {"person": p, "events": [a[2], b[2]]}
    return None, {}


@functools.lru_cache(maxsize=4096)  # the planner compares the same few titles on every step
def _norm(title: str) -> str:
    return " ".join(title.lower().split())


def _create_problem(r: dict[str, Any], e: Event, hours: dict[str, list[int]]) -> str | None:
    if sorted(e["attendees"]) != sorted(r["attendees"]):
        return "wrong_attendees"
    if e["end"] - e["start"] != r["duration"]:
        return "wrong_duration"
    if e["day"] not in r["days"]:
        return "wrong_day"
    if r.get("start") is not None and e["start"] != r["start"]:
        return "wrong_time"
    if r.get("window") and not (WINDOWS[r["window"]][0] <= e["start"] and e["end"] <= WINDOWS[r["window"]][1]):
        return "outside_window"
    if outside_hours(hours, e["attendees"], e["start"], e["end"]):
        return "outside_hours"
    return None


# ----------------------------------------------------------------------------------------------
# Planning: the oracle's next step from any state


def next_step(data: dict[str, Any], events: dict[str, Event]) -> tuple[str, dict[str, Any]] | None:
    """The next tool call of a correct solution from ``events``, or None when nothing is left to do."""
    initial = {e["id"]: e for e in data["events"]}
    hours = data["people"]
    touched = {r[k] for r in data["requests"] for k in ("id", "movable") if r.get(k)}
    new = sorted(set(events) - set(initial), key=lambda i: int(i[1:]))
    titles = {i: _norm(events[i]["title"]) for i in new}
    wanted = [_norm(r["title"]) for r in data["requests"] if r["kind"] == "create"]
    for t in wanted:  # undo stray and duplicate creations first
        for dup in [i for i in new if titles[i] == t][1:]:
            return "cancel_event", {"event_id": dup}
    for i in new:
        if titles[i] not in wanted:
            return "cancel_event", {"event_id": i}
    for i, was in initial.items():  # put back what a wrong step displaced
        e = events.get(i)
        if (
            i not in touched
            and e is not None
            and e is not was
            and e != was
            and not conflicts(events, was["attendees"], was["day"], was["start"], was["end"], skip=i)
        ):
            return "move_event", {"event_id": i, "day": was["day"], "start": fmt(was["start"])}
    for r in data["requests"]:
        if r["kind"] == "cancel" and r["id"] in events:
            return "cancel_event", {"event_id": r["id"]}
        if r["kind"] == "move" and r["id"] in events and not _placed(events[r["id"]], r["day"], events, hours):
            e = events[r["id"]]
            starts = free_starts(data, events, e["attendees"], r["day"], e["end"] - e["start"], skip=e["id"])
            if starts:
                return "move_event", {"event_id": e["id"], "day": r["day"], "start": fmt(starts[0])}
        if r["kind"] == "create":
            step = _create_step(data, events, r, [events[i] for i in new if titles[i] == _norm(r["title"])])
            if step is not None:
                return step
    return None


def _placed(e: Event, day: str, events: dict[str, Event], hours: dict[str, list[int]]) -> bool:
    """Whether ``e`` sits on ``day`` inside its attendees' hours, clashing with nothing."""
    return (
        e["day"] == day
        and not outside_hours(hours, e["attendees"], e["start"], e["end"])
        and not conflicts(events, e["attendees"], e["day"], e["start"], e["end"], skip=e["id"])
    )


def _create_step(
    data: dict[str, Any], events: dict[str, Event], r: dict[str, Any], found: list[Event]
) -> tuple[str, dict[str, Any]] | None:
    hours = data["people"]
    fixed = r.get("start") is not None
    blocker = events.get(r["movable"]) if fixed else None
    if found:
        e = found[0]
        # A misplaced meeting is cancelled and made again; a fixed one stays, its blocker moves next.
        if (
            _create_problem(r, e, hours)
            or not fixed
            and conflicts(events, e["attendees"], e["day"], e["start"], e["end"], skip=e["id"])
        ):
            return "cancel_event", {"event_id": e["id"]}
    day = r["days"][0]
    if blocker is not None:
        start, end = r["start"], r["start"] + r["duration"]
        slot = {"_new": {"id": "_new", "attendees": blocker["attendees"], "day": day, "start": start, "end": end}}
        if not _placed(blocker, day, {**events, **slot}, hours):
            # Move the blocker where it hits neither the new meeting nor anything else.
            starts = free_starts(
                data,
                {**events, **slot},
                blocker["attendees"],
                day,
                blocker["end"] - blocker["start"],
                skip=blocker["id"],
            )
            return ("move_event", {"event_id": blocker["id"], "day": day, "start": fmt(starts[0])}) if starts else None
    if found:
        return None
    if fixed:
        return "create_event", {
            "title": r["title"],
            "attendees": r["attendees"],
            "day": day,
            "start": fmt(r["start"]),
            "duration": r["duration"],
        }
    for day in r["days"]:
        starts = free_starts(data, events, r["attendees"], day, r["duration"], window=r.get("window"))
        if starts:
            return "create_event", {
                "title": r["title"],
                "attendees": r["attendees"],
                "day": day,
                "start": fmt(starts[0]),
                "duration": r["duration"],
            }
    return None


def apply_step(events: dict[str, Event], step: tuple[str, dict[str, Any]], next_id: int) -> int:
    """Apply a validated step to ``events`` exactly as the tools do; returns the next free id number."""
    name, a = step
    if name == "cancel_event":
        del events[a["event_id"]]
    elif name == "move_event":
        e = events[a["event_id"]]
        h, m = map(int, a["start"].split(":"))
        events[e["id"]] = {**e, "day": a["day"], "start": h * 60 + m, "end": h * 60 + m + e["end"] - e["start"]}
    else:
        h, m = map(int, a["start"].split(":"))
        eid = f"e{next_id}"
        events[eid] = {
            "id": eid,
            "title": a["title"],
            "attendees": list(a["attendees"]),
            "day": a["day"],
            "start": h * 60 + m,
            "end": h * 60 + m + a["duration"],
        }
        return next_id + 1
    return next_id


# ----------------------------------------------------------------------------------------------
# Generation


def generate_world(p: CalendarParams, rng: random.Random) -> dict[str, Any]:
    """People, events and requests for params ``p``, solvable by :func:`next_step`."""
    for _ in range(MAX_DRAWS):  # a world without room for the requests is replaced; most first draws have room
        data = _draw(p, rng)
        if data is not None:
            return data
    raise InvalidParamsError(
        f"calendar: no calendar in {MAX_DRAWS} draws had room for these requests; expected "
        "params with fewer attendees, requests or busy hours"
    )


def _draw(p: CalendarParams, rng: random.Random) -> dict[str, Any] | None:
    names = sorted(rng.sample(NAMES, p.people), key=NAMES.index)
    days = list(DAYS[: p.days])
    people = {
        n: [rng.choice([480, 510, 540, 570, 600]), rng.choice([960, 990, 1020, 1050, 1080])]
        if p.varied_hours
        else [540, 1020]
        for n in names
    }  # 08:00-10:00 starts, 16:00-18:00 ends
    titles = [f"{t} {k}" for t in TOPICS for k in KINDS]
    rng.shuffle(titles)
    fresh = [titles.pop() for _ in range(p.creates + int(p.blocker))]  # titles no existing event has
    events: dict[str, Event] = {}
    taken: dict[tuple[str, str], list[tuple[int, int]]] = {(n, d): [] for n in names for d in days}
    draw = rng.random  # int(draw() * n) over rng.sample/choice: a few hundred draws per world add up
    for day in days:
        for _ in range(p.busy * p.people // 2):
            # Draw a time and keep it only if it is free: cheaper than listing every free slot first.
            size = min(p.people, (1, 2, 2, 3)[int(draw() * 4)])
            picked: set[int] = set()
            while len(picked) < size:
                picked.add(int(draw() * len(names)))
            group = [names[i] for i in sorted(picked)]
            dur = (30, 60, 60, 90)[int(draw() * 4)]
            lo, hi = max(people[n][0] for n in group), min(people[n][1] for n in group)
            slots = (hi - dur - lo) // GRID + 1
            if slots <= 0 or not titles:
                continue
            start = lo + GRID * int(draw() * slots)
            if any(start < f and s < start + dur for n in group for s, f in taken[n, day]):
                continue
            for n in group:
                taken[n, day].append((start, start + dur))
            eid = f"e{len(events) + 1}"
            events[eid] = {
                "id": eid,
                "title": titles.pop(),
                "attendees": group,
                "day": day,
                "start": start,
                "end": start + dur,
            }
    return _add_requests(p, rng, names, days, people, events, fresh)


def _add_requests(
    p: CalendarParams,
    rng: random.Random,
    names: list[str],
    days: list[str],
    people: dict[str, list[int]],
    events: dict[str, Event],
    fresh: list[str],
) -> dict[str, Any] | None:
    """Requests drawn one at a time, each kept only if the planner can carry it out after the ones before.

    The planner handles requests in order and never undoes a finished one, so checking each against
    the calendar the earlier ones leave behind makes the whole list solvable without redrawing it.
    """
    requests: list[dict[str, Any]] = []
    work = dict(events)
    next_id = len(events) + 1

    def keep(request: dict[str, Any]) -> bool:
        nonlocal work, next_id
        data = {"people": people, "events": list(events.values()), "requests": requests + [request]}
        trial, trial_id = dict(work), next_id
        for _ in range(4):
            step = next_step(data, trial)
            if step is None:
                break
            trial_id = apply_step(trial, step, trial_id)
        # A cheap look at the new request here; the full check runs once, on the final calendar.
        if step is not None or not _looks_done(request, trial):
            return False
        requests.append(request)
        work, next_id = trial, trial_id
        return True

    if p.blocker:  # first, so that no later meeting takes its fixed slot
        for _ in range(10):
            group = sorted(rng.sample(names, p.attendees), key=names.index)
            day, dur = rng.choice(days), rng.choice([30, 60])
            starts = free_starts({"people": people}, events, group, day, dur)
            if not starts:
                continue
            start, owner = rng.choice(starts), rng.choice(group)
            eid = f"e{len(events) + 1}"
            events[eid] = work[eid] = {
                "id": eid,
                "title": f"Focus time ({owner})",
                "attendees": [owner],
                "day": day,
                "start": start,
                "end": start + dur,
            }
            next_id = len(events) + 1
            if keep(
                {
                    "kind": "create",
                    "title": fresh[-1],
                    "duration": dur,
                    "attendees": group,
                    "days": [day],
                    "window": None,
                    "start": start,
                    "movable": eid,
                }
            ):
                fresh.pop()
                break
            del events[eid], work[eid]
            next_id = len(events) + 1
        else:
            return None
    pool = [i for i in events if not events[i]["title"].startswith("Focus time")]
    rng.shuffle(pool)
    for kind, count in (("cancel", p.cancels), ("move", p.moves), ("create", p.creates)):
        for _ in range(count):
            for _ in range(10):
                if kind == "create":
                    request = {
                        "kind": "create",
                        "title": fresh[-1],
                        "duration": rng.choice([30, 45, 60, 90]),
                        "attendees": sorted(rng.sample(names, p.attendees), key=names.index),
                        "days": sorted(rng.sample(days, min(len(days), rng.choice([1, 2]))), key=days.index),
                        "window": rng.choice([None, "morning", "afternoon"]) if p.windows else None,
                    }
                elif not pool:
                    return None
                else:
                    e = events[pool[-1]]
                    request = {"kind": kind, "id": e["id"], "title": e["title"]}
                    if kind == "move":
                        request["day"] = rng.choice([d for d in days if d != e["day"]])
                if keep(request):
                    (fresh if kind == "create" else pool).pop()
                    break
                if kind != "create":
                    rng.shuffle(pool)
            else:
                return None
    data = {
        "days": days,
        "people": people,
        "events": list(events.values()),
        "requests": requests,
        "text": _goal_text(requests, events),
    }
    return data if check(data, work)[0] is None else None


def _looks_done(r: dict[str, Any], events: dict[str, Event]) -> bool:
    if r["kind"] == "cancel":
        return r["id"] not in events
    if r["kind"] == "move":
        return r["id"] in events and events[r["id"]]["day"] == r["day"]
    return any(e["title"] == r["title"] for e in events.values())


def _goal_text(requests: list[dict[str, Any]], events: dict[str, Event]) -> str:
    lines = []
    for r in requests:
        if r["kind"] == "cancel":
            e = events[r["id"]]
            lines.append(f"Cancel {e['title']!r} on {e['day']}.")
        elif r["kind"] == "move":
            lines.append(f"Move {r['title']!r} to {r['day']}, at any time that works; keep its length and attendees.")
        else:
            who = ", ".join(r["attendees"])
            when = (
                f"on {r['days'][0]} at {fmt(r['start'])}"
                if r.get("start") is not None
                else "on " + " or ".join(r["days"]) + (f", {WINDOW_TEXT[r['window']]}" if r.get("window") else "")
            )
            line = f"Schedule {r['title']!r} for {r['duration']} minutes with {who} {when}."
            if r.get("movable"):
                m = events[r["movable"]]
                line += f" {m['title']!r} may be moved to another free time the same day if it is in the way."
            lines.append(line)
    return "\n".join(f"- {x}" for x in lines)
