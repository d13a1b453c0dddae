"""calendar: carry out scheduling requests on a team calendar (see schedule.py for the world)."""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field

from campflow.bootcamps.base import (
    Action,
    Bootcamp,
    Instance,
    NoArgs,
    Observation,
    Score,
    State,
    ToolArgs,
    tool,
)
from campflow.bootcamps.calendar.schedule import (
    CalendarParams,
    Event,
    apply_step,
    check,
    conflicts,
    describe,
    fmt,
    free_starts,
    generate_world,
    next_step,
    outside_hours,
)
from campflow.bootcamps.demonstration import exchanges
from campflow.bootcamps.messages import clip
from campflow.errors import ToolError

MAX_TITLE_CHARS = 80
_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")


class ListArgs(ToolArgs):
    """Arguments of list_events."""

    day: str = Field("", description="only this day (Mon-Fri); empty for all days")
    person: str = Field("", description="only this person's events; empty for everyone")


class SlotArgs(ToolArgs):
    """Arguments of find_free_slots."""

    attendees: list[str] = Field(description="the people who must all be free")
    day: str = Field(description="a day of the calendar, such as Tue")
    duration: int = Field(description="minutes, 15 to 480 in steps of 15")


class CreateArgs(ToolArgs):
    """Arguments of create_event."""

    title: str = Field(description="the event's title, at most 80 characters")
    attendees: list[str] = Field(description="the people attending")
    day: str = Field(description="a day of the calendar, such as Tue")
    start: str = Field(description="start time HH:MM on a quarter hour, such as 14:30")
    duration: int = Field(description="minutes, 15 to 480 in steps of 15")


class MoveArgs(ToolArgs):
    """Arguments of move_event."""

    event_id: str = Field(description="the event's id, such as e4")
    day: str = Field(description="the new day")
    start: str = Field(description="the new start time HH:MM; the length stays the same")


class EventArgs(ToolArgs):
    """Arguments of cancel_event."""

    event_id: str = Field(description="the event's id, such as e4")


@dataclass
class CalendarState(State):
    """The episode's events (id -> event) and the number the next new event gets."""

    events: dict[str, Event] = field(default_factory=dict)
    next_id: int = 1


class Calendar(Bootcamp[CalendarParams, CalendarState]):
    """Carry out scheduling requests on a small team's calendar.

    `list_events` shows the calendar (by day or person), `find_free_slots` lists start times when
    given people are all at work and free, and `create_event`, `move_event` and `cancel_event` change
    it. Every meeting must lie within each attendee's working hours and must not overlap another
    event of any attendee. Do exactly what the requests ask, change nothing else, then call `done`.

    Levels add people, days and existing events, then requests to cancel and to move events, time
    windows (morning or afternoon), different working hours, and a fixed-time meeting that only fits
    once a focus block is moved. Reward is 1 only when every request holds, no one is double-booked,
    and no other event was created, moved or cancelled; else 0. Reasons: `missing_event`,
    `wrong_attendees`, `wrong_duration`, `wrong_day`, `wrong_time`, `outside_window`, `outside_hours`,
    `not_moved`, `not_cancelled`, `blocker_misplaced`, `extra_event`, `changed_other`, `overlap`.
    """

    name = "calendar"
    version = "1"
    params_model = CalendarParams
    state_model = CalendarState
    levels = {
        1: CalendarParams(level=1, people=3, days=1, busy=3, creates=1, attendees=2),
        2: CalendarParams(level=2, people=4, days=2, busy=4, creates=1, cancels=1, attendees=3, varied_hours=True),
        3: CalendarParams(
            level=3,
            people=5,
            days=3,
            busy=4,
            creates=1,
            moves=1,
            cancels=1,
            attendees=3,
            windows=True,
            varied_hours=True,
        ),
        4: CalendarParams(
            level=4,
            people=6,
            days=3,
            busy=4,
            creates=2,
            moves=1,
            cancels=1,
            attendees=3,
            windows=True,
            blocker=True,
            varied_hours=True,
        ),
    }

    # -- instruction generation -----------------------------------------------------------------

    def build(self, params: CalendarParams, rng: random.Random) -> dict[str, Any]:
        return generate_world(params, rng)

    def prompt(self, instance: Instance[CalendarParams]) -> list[dict[str, Any]]:
        d = instance.data
        hours = ", ".join(f"{n} {fmt(a)}-{fmt(b)}" for n, (a, b) in d["people"].items())
        return self.chat(f"Calendar days: {', '.join(d['days'])}. Working hours: {hours}.\nRequests:\n{d['text']}")

    def new_state(self, instance: Instance[CalendarParams]) -> CalendarState:
        # The identity's own event dicts, not copies: the tools replace an event's dict on every change
        # (schedule.apply_step) and never edit one, and unchanged events then compare by identity.
        events = {e["id"]: e for e in instance.data["events"]}
        return CalendarState(events=events, next_id=len(events) + 1)

    def max_turns(self, instance: Instance[CalendarParams]) -> int:
        return 4 * len(instance.data["requests"]) + 12

    # -- tools -----------------------------------------------------------------------------------

    @tool
    def list_events(self, instance: Instance, state: CalendarState, args: ListArgs) -> Observation:
        """List events, optionally only one day's or one person's, in time order."""
        day = _day(instance, args.day) if args.day.strip() else None
        person = _people(instance, [args.person])[0] if args.person.strip() else None
        rows = sorted(
            (
                e
                for e in state.events.values()
                if (day is None or e["day"] == day) and (person is None or person in e["attendees"])
            ),
            key=lambda e: (instance.data["days"].index(e["day"]), e["start"], e["id"]),
        )
        return Observation("\n".join(describe(e) for e in rows) if rows else "No events.")

    @tool
    def find_free_slots(self, instance: Instance, state: CalendarState, args: SlotArgs) -> Observation:
        """Start times (every 30 minutes) when all the given people are at work and free."""
        people = _people(instance, args.attendees)
        day, duration = _day(instance, args.day), _duration(args.duration)
        starts = free_starts(instance.data, state.events, people, day, duration)
        if not starts:
            return Observation(f"No free {duration}-minute slot on {day} for {', '.join(people)}.")
        return Observation(
            f"Free {duration}-minute starts on {day} for {', '.join(people)}: " + ", ".join(fmt(s) for s in starts)
        )

    @tool
    def create_event(self, instance: Instance, state: CalendarState, args: CreateArgs) -> Observation:
        """Create an event."""
        title = args.title.strip()
        if not 1 <= len(title) <= MAX_TITLE_CHARS:
            raise ToolError(f"title is {len(title)} characters long; expected 1 to {MAX_TITLE_CHARS}")
        people, day = _people(instance, args.attendees), _day(instance, args.day)
        start, duration = _time(args.start), _duration(args.duration)
        _fits_day(start, duration)
        state.next_id = apply_step(
            state.events,
            (
                "create_event",
                {"title": title, "attendees": people, "day": day, "start": fmt(start), "duration": duration},
            ),
            state.next_id,
        )
        e = state.events[f"e{state.next_id - 1}"]
        return Observation(f"Created {describe(e)}." + _warnings(instance, state, e))

    @tool
    def move_event(self, instance: Instance, state: CalendarState, args: MoveArgs) -> Observation:
        """Move an event to another day and/or start time, keeping its length."""
        e = _event(state, args.event_id)
        day, start = _day(instance, args.day), _time(args.start)
        _fits_day(start, e["end"] - e["start"])
        apply_step(state.events, ("move_event", {"event_id": e["id"], "day": day, "start": fmt(start)}), state.next_id)
        moved = state.events[e["id"]]
        return Observation(f"Moved to {describe(moved)}." + _warnings(instance, state, moved))

    @tool
    def cancel_event(self, instance: Instance, state: CalendarState, args: EventArgs) -> Observation:
        """Cancel (delete) an event."""
        e = _event(state, args.event_id)
        apply_step(state.events, ("cancel_event", {"event_id": e["id"]}), state.next_id)
        return Observation(f"Cancelled {describe(e)}.")

    @tool(final=True)
    def done(self, instance: Instance, state: CalendarState, args: NoArgs) -> Observation:
        """Declare every request handled. This ends the episode."""
        state.answer = "done"
        return Observation("Finished.", final=True)

    # -- reward ----------------------------------------------------------------------------------

    def score(self, instance: Instance, state: CalendarState, transcript: Any) -> Score:
        reason, details = check(instance.data, state.events)
        if reason is None and state.answer == "done":
            return Score(1.0, True, {"events": len(state.events)})
        return Score(0.0, False, {**details, "reason": reason or "unfinished"})

    # -- oracle ----------------------------------------------------------------------------------

    def oracle(self, instance: Instance, state: CalendarState) -> Action:
        step = next_step(instance.data, state.events)
        return Action(*step) if step is not None else Action("done", {})

    def demonstrate(self, instance: Instance, state: CalendarState, transcript: Sequence[Mapping[str, Any]]) -> Action:
        """No event id is in the prompt: list the calendar first and again after each change before
        moving or cancelling, and ask `find_free_slots` before booking a meeting whose time is not
        given and before moving an event (its length is the one listed); then act as the oracle
        does, on ids and times those results showed. A move goes to the oracle's start if the slots
        shown hold it, else to the first start shown that keeps clear of the fixed-time meetings the
        prompt asks for."""
        since: list[tuple[str, dict[str, Any], str]] = []  # observations since the calendar last changed
        for name, args, result in exchanges(transcript):
            if name in _CHANGES and not result.startswith("Error"):
                since = []
            elif name in ("list_events", "find_free_slots"):
                since.append((name, args, result))
        action = self.oracle(instance, state)
        a = action.arguments
        if action.name != "done" and not any(n == "list_events" for n, _, _ in since):
            return Action("list_events", {})
        fixed = [r for r in instance.data["requests"] if r["kind"] == "create" and r.get("start") is not None]
        if action.name == "create_event" and not any(_same_title(r, a["title"]) for r in fixed):
            slots = {"attendees": list(a["attendees"]), "day": a["day"], "duration": a["duration"]}
            if not any((n, q) == ("find_free_slots", slots) for n, q, _ in since):
                return Action("find_free_slots", slots)
        if action.name == "move_event":
            e = state.events[a["event_id"]]
            length = e["end"] - e["start"]
            slots = {"attendees": list(e["attendees"]), "day": a["day"], "duration": length}
            shown = [r for n, q, r in since if (n, q) == ("find_free_slots", slots)]
            if not shown:
                return Action("find_free_slots", slots)
            starts = [_time(t) for t in re.findall(r"\d{2}:\d{2}", shown[-1].split(": ", 1)[-1])]
            clear = [
                s
                for s in starts
                if not any(
                    r["days"][0] == a["day"] and s < r["start"] + r["duration"] and r["start"] < s + length
                    for r in fixed
                )
            ]
            if _time(a["start"]) not in starts and clear:
                return Action("move_event", {**a, "start": fmt(clear[0])})
        return action

    def perturb(self, instance: Instance, state: CalendarState, action: Action, rng: random.Random) -> Action:
        a = dict(action.arguments)
        if action.name == "create_event":
            if rng.random() < 0.5 and len(a["attendees"]) > 1:
                a["attendees"] = a["attendees"][:-1]  # forgot someone
            else:
                a["start"] = fmt(_time(a["start"]) + rng.choice([30, 60]))
            return Action("create_event", a)
        if action.name == "move_event":
            return Action("move_event", {**a, "start": fmt(min(_time(a["start"]) + 60, 22 * 60))})
        if action.name == "cancel_event":
            others = sorted(set(state.events) - {a["event_id"]})
            return Action("cancel_event", {"event_id": rng.choice(others)}) if others else action
        return action

    def wrong_answer(self, instance: Instance, state: CalendarState, rng: random.Random) -> Action:
        # Finishing early fails unless the work is done; from a finished calendar a stray extra event
        # (a plausible slip) makes `done` wrong.
        if check(instance.data, state.events)[0] is not None:
            return Action("done", {})
        person, day = rng.choice(sorted(instance.data["people"])), rng.choice(instance.data["days"])
        return Action(
            "create_event",
            {"title": "Coffee chat", "attendees": [person], "day": day, "start": "12:00", "duration": 30},
        )


_CHANGES = ("create_event", "move_event", "cancel_event")


def _same_title(request: dict[str, Any], title: str) -> bool:
    return " ".join(request["title"].lower().split()) == " ".join(title.lower().split())


def _day(instance: Instance, raw: str) -> str:
    key = raw.strip()[:3].title()
    if key not in instance.data["days"] or len(raw.strip()) > 12:
        raise ToolError(
            f"day {clip(raw, 40)!r} is not on this calendar; expected one of {', '.join(instance.data['days'])}"
        )
    return key


def _people(instance: Instance, raw: list[str]) -> list[str]:
    known = {n.lower(): n for n in instance.data["people"]}
    if not 1 <= len(raw) <= len(known):
        raise ToolError(f"{len(raw)} attendees given; expected 1 to {len(known)} of: {', '.join(known.values())}")
    out = []
    for name in raw:
        person = known.get(name.strip().lower())
        if person is None:
            raise ToolError(f"unknown person {clip(name, 40)!r}; expected one of {', '.join(known.values())}")
        if person in out:
            raise ToolError(f"{person} is listed twice; expected each attendee once")
        out.append(person)
    return sorted(out, key=list(known.values()).index)


def _time(raw: str) -> int:
    m = _TIME.match(raw.strip())
    if not m or int(m.group(1)) > 23 or int(m.group(2)) > 59:
        raise ToolError(f"start {clip(raw, 40)!r} is not a time; expected HH:MM such as 09:30")
    minutes = int(m.group(1)) * 60 + int(m.group(2))
    if minutes % 15:
        raise ToolError(f"start {raw.strip()!r} is not on a quarter hour; expected minutes 00, 15, 30 or 45")
    return minutes


def _duration(value: int) -> int:
    if not 15 <= value <= 480 or value % 15:
        raise ToolError(f"duration {value} is not allowed; expected minutes from 15 to 480 in steps of 15")
    return value


def _fits_day(start: int, duration: int) -> None:
    if start + duration > 24 * 60:
        raise ToolError(
            f"an event from {fmt(start)} lasting {duration} minutes would end after midnight; "
            "expected it to end by 24:00"
        )


def _event(state: CalendarState, raw: str) -> Event:
    eid = raw.strip().lower()
    if eid not in state.events:
        ids = sorted(state.events, key=lambda i: int(i[1:]))
        shown = ", ".join(ids) if len(ids) <= 12 else ", ".join(ids[:12]) + ", ..."
        raise ToolError(f"unknown event id {clip(raw, 40)!r}; expected one of {shown} (see list_events)")
    return state.events[eid]


def _warnings(instance: Instance, state: CalendarState, e: Event) -> str:
    """What a calendar app would point out: clashes and hours outside someone's working day."""
    notes = [
        f" Warning: overlaps {other['id']} {other['title']!r} for {p}."
        for other, p in conflicts(state.events, e["attendees"], e["day"], e["start"], e["end"], skip=e["id"])
    ]
    notes += [
        f" Warning: outside {p}'s working hours."
        for p in outside_hours(instance.data["people"], e["attendees"], e["start"], e["end"])
    ]
    return "".join(notes)
