"""The bootcamp interface: four layers and an oracle. This file is all you need to write a bootcamp.

A *bootcamp* is one family of agent tasks. Writing one means subclassing :class:`Bootcamp` and filling
in four small layers, each testable on its own, plus an oracle:

1. **Instruction generation** -- :meth:`~Bootcamp.build` makes the *identity* of one instance (a
   JSON-able dict) from params and a seeded rng; :meth:`~Bootcamp.prompt` poses it as chat messages.
2. **Tools** -- methods marked :func:`tool`, acting on the episode's world (:meth:`~Bootcamp.new_state`).
3. **Interaction control** -- :meth:`~Bootcamp.max_turns`, :meth:`~Bootcamp.no_tool_call_reply`,
   :meth:`~Bootcamp.feedback`: the turn budget and what the environment says between turns.
4. **Reward** -- :meth:`~Bootcamp.score`: reward in [0, 1], success, and a failure ``reason``.
5. **Oracle** -- :meth:`~Bootcamp.oracle`, the next correct action from any live state: it proves
   instances solvable and makes tests exact. :meth:`~Bootcamp.demonstrate` is its grounded twin that
   teaches SFT: it observes first and acts only on what the transcript shows. :meth:`~Bootcamp.wrong_answer` and
   :meth:`~Bootcamp.perturb` let test and demo policies fail on purpose; the optional
   :meth:`~Bootcamp.divergence_kind` names, in the world's terms, the step where a failed episode left
   every correct path (:mod:`campflow.synthesis.divergence`).

The values they pass (defined in :mod:`campflow.bootcamps.values`, imported from here):
:class:`Params` (bounded, described knobs; ``level`` included), :class:`Instance` (``id``, ``params``,
``seed``, ``data`` = the identity), :class:`State` (``finished``, ``answer`` and your own fields),
:class:`ToolArgs` / :class:`NoArgs` (a tool's arguments), :class:`Action` (``name``, ``arguments``),
:class:`Observation` (``text``, ``image`` PNG bytes or None, ``final``) and :class:`Score` (``reward``,
``success``, ``details``), :class:`~campflow.errors.ToolError` (what a tool raises to refuse a call).
A demonstrator reads the transcript with :func:`tool_results`, :func:`exchanges`, :func:`called`,
:func:`tool_calls` and :func:`shown_text`; :attr:`~Bootcamp.grounding` (an :class:`Exemptions`) lists
what its arguments may hold without having been shown.

A complete bootcamp (``tests/test_base_example.py`` runs exactly this text and holds it to the
contract; its class docstring is quoted with ``'''`` only because it sits inside this one)::

    from pydantic import Field

    from campflow.bootcamps import registry
    from campflow.bootcamps.base import Action, Bootcamp, Observation, Params, Score, State, ToolArgs, tool


    class EchoParams(Params):
        length: int = Field(3, ge=1, le=20, description="letters in the word")


    class AnswerArgs(ToolArgs):
        answer: str = Field(description="the word, exactly as it was given")


    class Echo(Bootcamp[EchoParams, State]):
        '''Repeat a word.

        You are given a word. Submit it, exactly as given, with `submit`.

        Levels lengthen the word. Reward is 1 for the exact word, else 0 (reason `mismatch`).
        '''

        name = "echo"
        version = "1"
        params_model = EchoParams
        levels = {1: EchoParams(level=1, length=3), 2: EchoParams(level=2, length=8),
                  3: EchoParams(level=3, length=16)}

        def build(self, params, rng):
            return {"word": "".join(rng.choice("abc") for _ in range(params.length))}

        def prompt(self, instance):
            return self.chat(f"Submit the word {instance.data['word']}.")

        @tool(final=True)
        def submit(self, instance, state, args: AnswerArgs) -> Observation:
            "Submit your final answer."
            state.answer = args.answer
            return Observation("Submitted.", final=True)

        def score(self, instance, state, transcript):
            ok = state.answer == instance.data["word"]  # state.answer is None if nothing was submitted
            return Score(float(ok), ok, {} if ok else {"reason": "mismatch"})

        def oracle(self, instance, state):
            return Action("submit", {"answer": instance.data["word"]})

        def wrong_answer(self, instance, state, rng):
            return Action("submit", {"answer": instance.data["word"] + "x"})


    registry.register("echo", Echo)
    echo = registry.make("echo")
    state, score = echo.solve(echo.generate(2, seed=7))  # level 2, seed 7: the same instance every time
    assert score.success

**Checking and importing your own file.** ``campflow bootcamps check warehouse.py`` runs this
contract and the demonstrator's grounding in a sandboxed process, each check with its verdict and
evidence; ``campflow import bootcamp warehouse.py`` records the file (and its source hash) in the
workspace, after which every command knows the bootcamp by its ``name`` (see ``docs/own-bootcamp.md``).

**Registering.** ``registry.register("echo", Echo)`` names a class in this process;
``register("echo", "mypackage.echo:Echo")`` imports it lazily by dotted path (which also works in
worker processes); ``registry.make("echo")`` builds it once per process (see
:mod:`campflow.bootcamps.registry`). The commands know the built-in bootcamps (``registry.BUILTIN``)
and imported ones (``campflow import``). :mod:`campflow.bootcamps.contract` checks what every bootcamp
must do: the oracle solves every level, wrong endings stay within :attr:`~Bootcamp.wrong_answer_bound`,
generation is deterministic.

**An episode.** The engine calls :meth:`~Bootcamp.new_state` and :meth:`~Bootcamp.prompt`; then each
turn the agent replies, each tool call is validated against its ``args`` model and run (a
:class:`~campflow.errors.ToolError` reaches the agent as ``Error: <message>``), images of non-final
observations follow as a user message, then :meth:`~Bootcamp.feedback`. It ends with a final tool
(``solved`` or ``wrong_answer``), the turn budget spent (``max_turns``), ``rollout.max_consecutive_errors``
unusable replies in a row (``format_error``, ``invalid_tool_call``) or an outgrown context
(``context_overflow``). :meth:`~Bootcamp.score` runs after *every* one of these endings -- then
``state.finished`` is False and ``state.answer`` still None -- and only infrastructure failures and
timeouts go unscored. A tool that raises anything but ``ToolError`` on the model's arguments ends the
episode as ``invalid_tool_call``, unscored (the world is in an unknown state): raise ``ToolError``
for what the agent should read and retry. An exception from setup (``new_state``, ``prompt``,
``tools``), ``feedback`` or ``score`` is a bug in the bootcamp: that episode alone is recorded as
``infra_error``, never blamed on the model (see :mod:`campflow.rollout.engine`).

**The system prompt** is :attr:`~Bootcamp.system_prompt` where a bootcamp sets it, else
:data:`SYSTEM_PREAMBLE`, a blank line and :meth:`~Bootcamp.describe_task`: the first two paragraphs of
the class docstring (a one-line summary, then what the agent must know). Later paragraphs are for
developers (levels, reward; ``campflow bootcamps show`` prints them).

**Versions.** An instance id hashes (name, version, params, seed). Bump :attr:`~Bootcamp.version`
whenever what an instance means changes -- ``build``, the prompt (system prompt and those docstring
paragraphs included), the tools, the reward -- so old ids and results stop matching new ones.
"""

from __future__ import annotations

import functools
import inspect
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, Generic, get_type_hints

from pydantic import BaseModel, ValidationError

from campflow.bootcamps.demonstration import (
    Exemptions,
    called,
    exchanges,
    schema_enums,
    shown_text,
    tool_calls,
    tool_results,
    ungrounded,
)
from campflow.bootcamps.schemas import Tool, clean_schema
from campflow.bootcamps.values import (
    Action,
    Instance,
    NoArgs,
    Observation,
    P,
    Params,
    S,
    Score,
    State,
    ToolArgs,
    format_validation_error,
    instance_id,
)
from campflow.errors import InvalidParamsError, ToolError

__all__ = [
    "SYSTEM_PREAMBLE",
    "Action",
    "Bootcamp",
    "Exemptions",
    "Instance",
    "NoArgs",
    "Observation",
    "Params",
    "Score",
    "State",
    "Tool",
    "ToolArgs",
    "ToolError",
    "called",
    "exchanges",
    "format_validation_error",
    "instance_id",
    "shown_text",
    "tool",
    "tool_calls",
    "tool_results",
]


def tool(fn: Callable[..., Observation] | None = None, *, final: bool = False) -> Any:
    """Mark a bootcamp method as a tool: ``@tool`` or ``@tool(final=True)``.

    The method's name is the tool's name, the first paragraph of its docstring the description the
    agent reads, and the annotation of its ``args`` parameter (a :class:`ToolArgs` subclass) the
    argument schema. A tool method is called as ``method(instance, state, args)``:

    Args:
        instance: the episode's :class:`Instance` (read it, never change it).
        state: the episode's world (the object :meth:`Bootcamp.new_state` made); the tool may change it.
        args: the call's arguments, already validated against the ``args`` annotation.

    Returns:
        An :class:`Observation`. ``final=True`` on the decorator marks tools that may end the episode
        (submit, done, checkout); the episode ends when such a tool returns ``Observation(final=True)``.
        Put what was submitted where :meth:`Bootcamp.score` reads it (``state.answer`` by convention).

    Raises:
        ToolError: when the world refuses the call (a wall, a missing file, a bad expression), raised
            *before* changing anything. The agent reads ``Error: <message>`` and the episode goes on.
            Tools never touch the host, the network or the store.
    """

    def mark(f: Callable[..., Observation]) -> Callable[..., Observation]:
        f.__campflow_tool__ = {"final": final}  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


def _first_paragraph(doc: str | None) -> str:
    return inspect.cleandoc(doc or "").split("\n\n")[0].replace("\n", " ").strip()


@functools.cache
def _system_prompt(task: str) -> str:
    return f"{SYSTEM_PREAMBLE}\n\n{task}"


@functools.cache
def _task_text(doc: str) -> str:
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(p.replace("\n", " ") for p in paragraphs[:2]).strip()


SYSTEM_PREAMBLE = (
    "You are an agent solving a task by calling tools. Call exactly the tools you are given, with "
    "arguments that match their schemas. Keep calling tools until the task is done."
)


class Bootcamp(Generic[P, S]):
    """One family of agent tasks, behind four layers (see the module docstring).

    The methods a bootcamp writes share their arguments: ``instance`` is the episode's
    :class:`Instance` (read it, never change it: ``instance.data`` is shared by every episode of the
    instance), ``state`` the episode's world (the object :meth:`new_state` made), and ``rng`` a
    ``random.Random`` seeded by the caller, the only randomness allowed.

    Class attributes a subclass sets:
        name: registry name, lowercase (``"calculator"``).
        version: bump when what an instance means changes (generation, prompt, tools, reward), so old
            instance ids stop matching.
        modality: ``"text"`` or ``"vision"``.
        params_model: the :class:`Params` subclass of this bootcamp.
        levels: difficulty presets, level number -> params (at least three, each with its own
            ``level``).
        state_model: the :class:`State` subclass (default :class:`State`).
        default_max_turns: turn budget unless :meth:`max_turns` says otherwise.
        wrong_answer_bound: the most reward :meth:`wrong_answer` can earn (0 unless partial credit
            makes a wrong final answer worth something); the contract holds every bootcamp to it.
        system_prompt: the system message of every prompt :meth:`chat` builds. None (the default):
            :data:`SYSTEM_PREAMBLE`, a blank line and :meth:`describe_task`.
        grounding: what :meth:`demonstrate`'s arguments may hold without having been shown, each for a
            stated reason (:class:`Exemptions`: a free-text field, a tool's own syntax words); values
            the tool schemas enumerate are always allowed. See :meth:`ungrounded_arguments`.
    """

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    modality: ClassVar[str] = "text"
    params_model: ClassVar[type[Params]] = Params
    levels: ClassVar[Mapping[int, Params]] = {}
    state_model: ClassVar[type[State]] = State
    default_max_turns: ClassVar[int] = 10
    wrong_answer_bound: ClassVar[float] = 0.0
    system_prompt: ClassVar[str | None] = None
    grounding: ClassVar[Exemptions] = Exemptions()

    _tools: ClassVar[dict[str, Tool]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        tools: dict[str, Tool] = {}
        for klass in reversed(cls.__mro__):
            for attr, fn in vars(klass).items():
                marker = getattr(fn, "__campflow_tool__", None)
                if marker is None:
                    continue
                if any(attr in vars(base) for base in Bootcamp.__mro__):
                    raise TypeError(
                        f"tool {cls.__name__}.{attr} would replace Bootcamp.{attr}; name the tool "
                        "something else (e.g. describe_table rather than describe)"
                    )
                hints = get_type_hints(fn)
                args_model = hints.get("args")
                if not (isinstance(args_model, type) and issubclass(args_model, ToolArgs)):
                    raise TypeError(f"tool {cls.__name__}.{attr} must annotate `args` with a ToolArgs subclass")
                tools[attr] = Tool(attr, _first_paragraph(fn.__doc__), args_model, marker["final"], fn)
        cls._tools = tools

    # -- instruction generation -----------------------------------------------------------------

    def params(self, value: Params | Mapping[str, Any] | int | None = None) -> P:
        """Validate params: a params object, a dict of knobs, a level number, or None (the lowest level).

        Raises:
            InvalidParamsError: naming the bad key, the value and what was expected.
        """
        if value is None:
            value = min(self.levels)
        if isinstance(value, int) and not isinstance(value, bool):
            if value not in self.levels:
                raise InvalidParamsError(
                    f"{self.name}: level {value} does not exist; expected one of {sorted(self.levels)}"
                )
            return self.levels[value]  # type: ignore[return-value]
        if isinstance(value, self.params_model):
            return value  # type: ignore[return-value]
        raw = value.model_dump() if isinstance(value, BaseModel) else dict(value)
        try:
            return self.params_model.model_validate(raw)  # type: ignore[return-value]
        except ValidationError as exc:
            raise InvalidParamsError(f"{self.name}: {format_validation_error(exc)}") from None

    def generate(self, params: Params | Mapping[str, Any] | int | None, seed: int) -> Instance[P]:
        """Make one instance, deterministically from (params, seed). Do not override; see :meth:`build`."""
        p = self.params(params)
        iid = instance_id(self.name, self.version, p, seed)
        data = self.build(p, random.Random(iid))
        return Instance(id=iid, bootcamp=self.name, version=self.version, params=p, seed=seed, data=data)

    def build(self, params: P, rng: random.Random) -> dict[str, Any]:
        """Generate the identity of one instance (called by :meth:`generate`).

        Args:
            params: validated params, an instance of :attr:`params_model`.
            rng: seeded from the instance id. Not the global ``random``, the clock, ``hash()`` or the
                order of a set of strings (the last two change with ``PYTHONHASHSEED``): the same
                (params, seed) must give the same identity in every process.

        Returns:
            The identity: a JSON-able dict that fully determines the task. The prompt, tools, score and
            oracle read it as ``instance.data``; nothing may change it afterwards.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement build()")

    def prompt(self, instance: Instance[P]) -> list[dict[str, Any]]:
        """The opening messages of an episode of ``instance`` (OpenAI format); deterministic.

        Returns:
            Usually ``self.chat(user_content)``: the system message and one user message whose content
            is text or, for vision, content parts (:func:`campflow.bootcamps.messages.image_parts`).
            The tool schemas travel separately; the prompt need not describe them.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement prompt()")

    def caption(self, instance: Instance[P], state: S) -> str | None:
        """What a vision bootcamp's frame of ``state`` shows that an agent must read, as one short text.

        It is the answer a vision model's reading pretraining learns to write for the frame
        (:mod:`campflow.training.reading`); it never reaches an episode. Name what a move depends on
        (where things stand, what they hold) in a form whose every token counts; a whole text view
        spends most of its tokens on what every frame shares.

        Returns:
            The caption, or None (the default) to use the text observation mode's view of the state.
        """
        return None

    def chat(self, user: str | list[dict[str, Any]], system: str | None = None) -> list[dict[str, Any]]:
        """``[system, user]`` messages.

        Args:
            user: the user message's content: text, or a list of content parts (text, image).
            system: the system message; None (the usual) means :attr:`system_prompt`, or if that is
                None too, :data:`SYSTEM_PREAMBLE` and :meth:`describe_task` with a blank line between.
        """
        return [
            {"role": "system", "content": system or self.system_prompt or _system_prompt(self.describe_task())},
            {"role": "user", "content": user},
        ]

    def describe_task(self) -> str:
        """The task as the agent reads it in the default system prompt.

        Defaults to the first two paragraphs of the class docstring, each paragraph's lines joined: by
        convention a one-line summary, then the instructions an agent needs. Later paragraphs are for
        developers (levels, reward).
        """
        return _task_text(type(self).__doc__ or "")

    # -- tools ---------------------------------------------------------------------------------

    def tools(self, instance: Instance[P]) -> Sequence[Tool]:
        """The tools offered for ``instance``: every ``@tool`` method, in definition order.

        Override only where the tools depend on the instance (the function-calling adapter's do).
        """
        return tuple(self._tools.values())

    def tool_schemas(self, instance: Instance[P]) -> list[dict[str, Any]]:
        """OpenAI function-calling schemas of :meth:`tools`."""
        return [t.schema() for t in self.tools(instance)]

    def new_state(self, instance: Instance[P]) -> S:
        """A fresh world for one episode of ``instance``, made before its first turn.

        Returns:
            By default ``state_model()``. Override to set the world up from the identity, copying what
            the tools will change.
        """
        return self.state_model()  # type: ignore[return-value]

    def call(self, instance: Instance[P], state: S, name: str, args: ToolArgs) -> Observation:
        """Run tool ``name`` with validated ``args`` (what the engine calls); raises ToolError if the
        world refuses the call."""
        t = self._tools[name]
        return t.method(self, instance, state, args)  # type: ignore[misc]

    def apply(self, instance: Instance[P], state: S, action: Action) -> Observation:
        """Validate an :class:`Action`'s arguments and run it, setting ``state.finished`` after a final
        observation (no engine, no transcript)."""
        t = self._tools[action.name]
        obs = self.call(instance, state, action.name, t.args_model.model_validate(dict(action.arguments)))
        if obs.final:
            state.finished = True
        return obs

    # -- interaction control -------------------------------------------------------------------

    def max_turns(self, instance: Instance[P]) -> int:
        """The turn budget of an episode of ``instance`` (default :attr:`default_max_turns`).

        A turn is one reply of the agent, whatever it holds. When the budget is spent before a final
        tool, the episode ends as ``max_turns`` (and is still scored). A run's ``rollout.max_turns``
        overrides this for every instance.
        """
        return self.default_max_turns

    def no_tool_call_reply(self, instance: Instance[P], state: S, content: str) -> str:
        """What the environment says when the agent's reply has no usable tool call.

        Args:
            content: the text of the agent's reply (``state`` is unchanged by it).

        Returns:
            The user message sent back. Where the reply held a call that could not be parsed, the
            engine puts ``Error: <what was wrong>.`` before it.
        """
        names = ", ".join(t.name for t in self.tools(instance))
        return f"No tool call found. Reply with a tool call, one of: {names}."

    def feedback(self, instance: Instance[P], state: S, turn: int) -> str | None:
        """Optional feedback after a turn that did not end the episode.

        Args:
            turn: the index of the turn just played, from 0 (``state`` is the world after its calls).

        Returns:
            Text appended as a user message after the turn's tool results, or None (or "") for nothing.
        """
        return None

    # -- reward --------------------------------------------------------------------------------

    def score(self, instance: Instance[P], state: S, transcript: Sequence[Mapping[str, Any]]) -> Score:
        """Judge one episode: reward in [0, 1], success and details. Deterministic; changes nothing.

        Runs once after every episode, however it ended (a final tool, ``max_turns``, ``format_error``,
        ``invalid_tool_call``, ``context_overflow``); never after an infrastructure failure or timeout.
        So ``state`` may be mid-task: ``state.finished`` False and ``state.answer`` still None.

        Args:
            state: the world as the episode left it.
            transcript: the episode's messages in OpenAI format, prompt first; empty when
                :meth:`solve` calls it, so score from ``state`` where you can.

        Returns:
            A :class:`Score`. The episode's reward is ``Score.reward`` whatever the ending (partial credit
            for an unfinished episode counts); it is solved only if ``Score.success`` and a final tool
            ended it. On failure give ``details["reason"]``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement score()")

    # -- oracle and deliberate failure -----------------------------------------------------------

    def oracle(self, instance: Instance[P], state: S) -> Action:
        """The next action of a correct solution from the live ``state``.

        Args:
            instance: the oracle may read all of it, hidden parts included.
            state: the world after earlier actions, which a noisy policy may have perturbed: recover
                from any state the tools can reach.

        Returns:
            The :class:`Action` to play next, with JSON-able arguments as the agent would send them.
            Played turn after turn, the oracle's actions must end with a final tool scoring reward 1
            and success within :meth:`max_turns` (the contract checks it at every level).
        """
        raise NotImplementedError(f"{type(self).__name__} must implement oracle()")

    def demonstrate(self, instance: Instance[P], state: S, transcript: Sequence[Mapping[str, Any]]) -> Action:
        """The next action of a *grounded* solution: what a teacher shows a model to imitate.

        Unlike :meth:`oracle` (which proves instances solvable and may act on hidden state), a
        demonstration first calls the observing tools an agent needs (list, look, search, describe)
        and passes as arguments only ids, paths, names and numbers that the prompt or an earlier tool
        result in ``transcript`` shows (:func:`campflow.bootcamps.demonstration.ungrounded` checks
        it). It may read ``state`` only for what those observations already told the agent.

        Args:
            transcript: the episode's messages so far (OpenAI format, prompt first).

        Returns:
            The :class:`Action` to play next; played turn after turn it must solve the instance within
            :meth:`max_turns`. Default: the oracle, right for bootcamps whose prompt shows everything
            the oracle reads (say so in the bootcamp when relying on it).
        """
        return self.oracle(instance, state)

    def ungrounded_arguments(self, instance: Instance[P], transcript: Sequence[Mapping[str, Any]]) -> list[str]:
        """What the tool calls of ``transcript`` (a demonstration) passed that nothing shown before them held.

        Default: :func:`~campflow.bootcamps.demonstration.ungrounded` with :attr:`grounding` and the
        values the tool schemas enumerate. Override to add a rule of the world's own where arguments are
        not names (a maze move must follow the map seen so far), calling this one too.

        Returns:
            One line per ungrounded token (``"turn 3 pick(bin_id): 'b7'"``); empty when all are grounded.
        """
        g = self.grounding
        enums = g.enums | schema_enums(self.tool_schemas(instance))
        return ungrounded(transcript, Exemptions(g.fields, g.syntax, enums, g.defines))

    def wrong_answer(self, instance: Instance[P], state: S, rng: random.Random) -> Action | None:
        """The next action of a wrong ending from ``state`` (test policies, the noisy oracle, the contract).

        Returns:
            A final action that never succeeds and scores at most :attr:`wrong_answer_bound`, or a step
            towards one (callers ask every turn until the episode ends), or None where no wrong ending
            is possible from here (a maze agent already on the goal); callers then play the oracle.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement wrong_answer()")

    def perturb(self, instance: Instance[P], state: S, action: Action, rng: random.Random) -> Action:
        """A plausible wrong version of the oracle's non-final ``action`` (the noisy oracle plays it).

        Args:
            action: the oracle's next action (never a final one).

        Returns:
            A step in the wrong direction, an off-by-one argument; default: ``action`` unchanged.
        """
        return action

    # -- where a failure began -------------------------------------------------------------------

    def normalize_arguments(self, instance: Instance[P], name: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """A call's arguments in the form two calls that mean the same act share.

        :mod:`campflow.synthesis.divergence` compares a model's call with the oracle's after this; calls
        that normalize alike are the same step. Default: validated by the tool's ``args`` model and
        dumped as JSON values under the names the schema shows (``"5"`` and ``5.0`` for a float field are
        one number).

        Raises:
            KeyError: ``name`` is not a tool of this bootcamp.
            pydantic.ValidationError: the arguments do not fit the tool's schema.
        """
        found = next((t for t in self.tools(instance) if t.name == name), None)
        if found is None:
            raise KeyError(f"{self.name} has no tool {name!r}")
        return found.args_model.model_validate(dict(arguments)).model_dump(mode="json", by_alias=True)

    def divergence_kind(
        self,
        instance: Instance[P],
        state: S,
        model_action: Action,
        oracle_action: Action,
        earlier: Sequence[Action] = (),
    ) -> str | None:
        """Name, in this bootcamp's terms, the step where a failed episode left every correct path.

        Called by :func:`campflow.synthesis.divergence.find_divergence` on the first call after which the
        oracle can no longer succeed in the turns left. Say more than the generic kinds (``wrong_tool``,
        ``argument:<field>``, ``early_submit``, ``no_submit``, ``extra_step``) where the world allows:
        an operator flipped, a distractor's number used, a wall walked into.

        Args:
            state: the world just *before* ``model_action`` (read it, never change it).
            model_action: the model's call, with the arguments as it sent them (it may have been refused).
            oracle_action: what :meth:`oracle` would have played from ``state``.
            earlier: the model's calls that ran before this one, refused ones included, in order (a
                revisit needs the way walked).

        Returns:
            A short lowercase kind (``"operator_flipped"``), or None (the default) for the generic kind.
        """
        return None

    #: divergence kind -> the params knobs under which that decision comes up more (``mutate`` moves them
    #: for a cluster of that kind); e.g. ``{"distractor_number": ("distractors",)}``
    divergence_knobs: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    def contrasts(self, instance: Instance[P], kind: str, model_action: Action | None = None) -> list[P]:
        """Params of problems that differ from ``instance`` where a divergence of ``kind`` decided, and
        little else: a minimal pair that only the step the model got wrong tells apart (calculator:
        ``operator_flipped`` gives the same numbers told with the deciding words changed). The ``mutate``
        synthesizer proposes them together, in one batch.

        Args:
            instance: a failed instance.
            kind: the divergence's kind (:meth:`divergence_kind` or a generic one).
            model_action: the model's call where it diverged, as sent (None for a turn without one).

        Returns:
            The params, all of them or none; default: none (the synthesizer moves knobs instead).
        """
        return []

    def solve(self, instance: Instance[P]) -> tuple[S, Score]:
        """Play the oracle against this bootcamp directly (no engine) and score the result.

        Raises:
            RuntimeError: if the oracle does not finish within :meth:`max_turns` (an unsolvable or
                mis-generated instance).
        """
        state = self.new_state(instance)
        for _ in range(self.max_turns(instance)):
            self.apply(instance, state, self.oracle(instance, state))
            if state.finished:
                return state, self.score(instance, state, ())
        raise RuntimeError(
            f"{self.name} oracle did not finish instance {instance.id} within {self.max_turns(instance)} turns"
        )

    def is_final(self, name: str) -> bool:
        """Whether tool ``name`` ends the episode."""
        t = self._tools.get(name)
        return bool(t and t.final)

    # -- documentation ---------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        """Everything ``campflow bootcamps show`` prints: docs, levels, params schema and tools."""
        return {
            "name": self.name,
            "version": self.version,
            "modality": self.modality,
            "description": inspect.cleandoc(type(self).__doc__ or ""),
            "levels": {lvl: p.model_dump(mode="json") for lvl, p in sorted(self.levels.items())},
            "params_schema": clean_schema(self.params_model.model_json_schema()),
            "tools": [
                {
                    "name": t.name,
                    "final": t.final,
                    "description": t.description,
                    "parameters": t.schema()["function"]["parameters"],
                }
                for t in self._tools.values()
            ],
        }
