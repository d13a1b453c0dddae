"""`campflow env serve`: bootcamps as OpenEnv environments, played through OpenEnv's own client.

Every server here is a real `campflow env serve` process on 127.0.0.1 (a free port, `--port 0`); the
clients are OpenEnv's (`GenericEnvClient` over its WebSocket protocol), and the trainer side is TRL's
`environment_factory`, exactly as docs/serving-and-teachers.md shows it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openenv.core import GenericEnvClient

from campflow.agents.base import PolicyReply
from campflow.agents.oracle import NoisyOraclePolicy, native_call
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action, Bootcamp, Instance
from campflow.bootcamps.messages import content_text
from campflow.bootcamps.splits import EVAL_SEED_BASE, eval_instances, train_instances
from campflow.errors import ToolError
from campflow.rollout.engine import EpisodeSpec, run_episode
from campflow.rollout.stepped import SteppedEpisode
from campflow.sources import ImportSpec
from tests.conftest import REPO, run_cli

GCD = ImportSpec(name="rg-gcd", adapter="reasoning-gym", source="gcd", options={"min_numbers": 2})
# built in: one tool, a maze to walk, two multi-tool worlds, a vision one; and an import
SERVED = ["calculator", "maze", "calendar", "filesystem", "gridworld", GCD.name]
PROBE_SEED = 7  # the calculator workspace records the first draw of this seed at level 1 as a probe
EPISODES_PER_LEVEL = 3


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """``{bootcamp: base URL}``, each served by its own `campflow env serve` in its own workspace.

    The calculator's workspace records an eval split and a probe before it starts; rg-gcd is imported
    into its own. Each server must stop cleanly on SIGTERM, with no traceback or error line in its log (OpenEnv's
    clients close every session here).
    """
    root = tmp_path_factory.mktemp("serve")
    calculator = _workspace(root / "calculator")
    calc = registry.make("calculator")
    calculator.store.write_instances(eval_instances(calc, 40), split="eval")
    calculator.store.write_instances(train_instances(calc, 1, seed=PROBE_SEED, params=1), split="probe")
    if _has_reasoning_gym():
        from campflow.storage.imports import import_bootcamp

        import_bootcamp(GCD, _workspace(root / GCD.name).store, cross_process=False)
    names = [n for n in SERVED if n != GCD.name or _has_reasoning_gym()]
    procs = {name: _start(name, root / name) for name in names}  # side by side: each takes seconds to import
    try:
        yield {name: _ready(proc) for name, proc in procs.items()}
    finally:
        logs = {name: _stop(proc) for name, proc in procs.items()}
    for name, (code, err) in logs.items():
        # nor a stop line: uvicorn's re-sent signal once made a server that had stopped as meant say
        # "error: stopped by SIGTERM" (and exit 143 when that thread won)
        assert code == 0 and "Traceback" not in err and "error:" not in err, f"{name} server: exit {code}\n{err}"


@pytest.mark.parametrize("name", SERVED)
def test_the_demonstrator_solves_every_level_through_openenvs_client_with_reward_1(
    servers: dict[str, str], name: str
) -> None:
    url = _served(servers, name)
    bootcamp = registry.make(name)
    with GenericEnvClient(base_url=url).sync() as env:
        for level in sorted(bootcamp.levels):
            for seed in range(EPISODES_PER_LEVEL):
                reward, termination = _play_demonstrator(env, bootcamp, seed=seed, level=level)
                assert (reward, termination) == (1.0, "solved"), f"{name} level {level} seed {seed}"


def test_a_vision_bootcamp_serves_its_images_in_the_messages(servers: dict[str, str]) -> None:
    with GenericEnvClient(base_url=servers["gridworld"]).sync() as env:
        prompt = env.reset(seed=0).observation["messages"]
    parts = [p for m in prompt if isinstance(m["content"], list) for p in m["content"]]
    assert any(p["type"] == "image_url" and p["image_url"]["url"].startswith("data:image/png;base64,") for p in parts)


def test_two_sessions_at_once_play_their_own_episodes(servers: dict[str, str]) -> None:
    bootcamp = registry.make("maze")
    with (
        GenericEnvClient(base_url=servers["maze"]).sync() as one,
        GenericEnvClient(base_url=servers["maze"]).sync() as two,
    ):
        games = [_Game(env, bootcamp, seed=seed, level=3) for env, seed in ((one, 11), (two, 12))]
        assert games[0].instance.id != games[1].instance.id
        while not all(g.done for g in games):
            for game in games:  # interleaved turns: each session keeps its own world
                if not game.done:
                    game.play(bootcamp.demonstrate(game.instance, game.state, game.transcript))
        assert [(g.reward, g.termination) for g in games] == [(1.0, "solved")] * 2


# (action, role of the answer, what it says): a model's mistakes, each answered as the engine answers it
BAD_ACTIONS = [
    ({"tool": "divide", "arguments": {"a": 1}}, "tool", "Error: unknown tool 'divide'; available: calculate, submit"),
    (
        {"tool": "calculate", "arguments": '{"expression": 1'},
        "tool",
        "Error: arguments of calculate are not valid JSON",
    ),
    ({"tool": "calculate", "arguments": {}}, "tool", "Error: invalid arguments for calculate: expression"),
    ({"tool": "calculate", "arguments": ["1 + 1"]}, "tool", "must be a JSON object, got list"),
    ({"tool": "submit", "arguments": {"answer": "lots"}}, "tool", "Error: invalid arguments for submit: answer"),
    ({"tool": "calculate", "arguments": {"expression": "1 / 0"}}, "tool", "Error: division by zero"),
    ({"content": "The answer is 42."}, "user", "No tool call found. Reply with a tool call, one of: calculate, submit"),
    ({"content": "<tool_call>{oops</tool_call>"}, "tool", "Error: the <tool_call> body is not valid JSON"),
]


@pytest.mark.parametrize(("action", "role", "says"), BAD_ACTIONS, ids=[str(a) for a, _, _ in BAD_ACTIONS])
def test_a_bad_action_gets_the_tools_error_and_the_episode_goes_on(
    servers: dict[str, str], action: dict[str, Any], role: str, says: str
) -> None:
    bootcamp = registry.make("calculator")
    with GenericEnvClient(base_url=servers["calculator"]).sync() as env:
        game = _Game(env, bootcamp, seed=BAD_ACTIONS.index((action, role, says)), level=2)
        answer = game.step(action)
        assert (answer.done, answer.reward, answer.observation["termination"]) == (False, 0.0, None)
        assert [m["role"] for m in answer.observation["messages"]] == [role]
        assert says in answer.observation["text"]
        while not game.done:  # the world is as it was: the demonstrator still solves it
            game.play(bootcamp.demonstrate(game.instance, game.state, game.transcript))
        assert (game.reward, game.termination) == (1.0, "solved")


def test_unusable_turns_in_a_row_end_the_episode_as_the_engine_does_then_steps_say_it_ended(
    servers: dict[str, str],
) -> None:
    with GenericEnvClient(base_url=servers["calculator"]).sync() as env:
        env.reset(seed=1)
        answers = [env.step({"tool": "divide", "arguments": {}}) for _ in range(3)]  # rollout.max_consecutive_errors
        assert [a.done for a in answers] == [False, False, True]
        assert (answers[-1].reward, answers[-1].observation["termination"]) == (0.0, "invalid_tool_call")
        after = env.step({"tool": "submit", "arguments": {"answer": 1}})
        assert after.done and after.observation["text"] == "Error: the episode has ended; call reset to start one."
        assert env.state()["termination"] == "invalid_tool_call"


def test_a_message_outside_the_action_schema_is_refused_and_the_session_goes_on(servers: dict[str, str]) -> None:
    with GenericEnvClient(base_url=servers["calculator"]).sync() as env:
        env.reset(seed=1)
        with pytest.raises(RuntimeError, match="Invalid message"):
            env.step({"tool": "submit", "answer": 3})  # `answer` belongs in `arguments`
        with pytest.raises(RuntimeError, match="level 9 is not served here; expected one of \\[1, 2, 3, 4\\]"):
            env.reset(level=9)
        assert env.reset(seed=1).observation["turn"] == 0


def test_openenvs_stateless_http_routes_answer_a_bad_request_plainly(servers: dict[str, str]) -> None:
    import requests

    url = servers["calculator"]
    reset = requests.post(f"{url}/reset", json={"seed": 2, "level": 1}, timeout=60)
    assert reset.status_code == 200 and reset.json()["observation"]["level"] == 1
    refused = requests.post(f"{url}/reset", json={"level": 9}, timeout=60)
    assert refused.status_code == 422 and "level 9 is not served here" in refused.json()["detail"]
    step = requests.post(f"{url}/step", json={"action": {"tool": "submit", "arguments": {"answer": 1}}}, timeout=60)
    assert step.status_code == 200 and step.json()["done"]  # HTTP holds no session: each request a fresh env
    assert step.json()["observation"]["text"] == "Error: no episode is running; call reset to start one."


def test_resets_serve_train_instances_never_the_eval_split_or_a_probe(servers: dict[str, str]) -> None:
    bootcamp = registry.make("calculator")
    evals = {i.id for i in eval_instances(bootcamp, 400)}  # the first 40 are on record, all are its seed range
    probe = train_instances(bootcamp, 1, seed=PROBE_SEED, params=1)[0]
    with GenericEnvClient(base_url=servers["calculator"]).sync() as env:
        drawn = []
        for _ in range(40):  # no seed: the server's next one each time
            env.reset()
            drawn.append(env.state())
        first = env.reset(seed=3).observation["instance_id"]
        again = env.reset(seed=3).observation["instance_id"]
        instead_of_probe = env.reset(seed=PROBE_SEED, level=1).observation["instance_id"]
    ids = [s["instance_id"] for s in drawn]
    assert len(set(ids)) == len(ids) and not set(ids) & evals
    assert all(s["seed"] < EVAL_SEED_BASE for s in drawn)
    assert sorted({s["level"] for s in drawn}) == sorted(bootcamp.levels)  # levels in rotation
    assert first == again == train_instances(bootcamp, 1, seed=3, params=4)[0].id  # seed 3: level 3 % 4 + 1
    assert instead_of_probe == train_instances(bootcamp, 2, seed=PROBE_SEED, params=1)[1].id != probe.id


# (arguments, what the one line says)
BAD_INPUT = [
    (["nosuch"], "error: unknown bootcamp 'nosuch'; expected one of: calculator"),
    (["calculator", "--level", "9"], "error: calculator: level 9 does not exist; expected one of [1, 2, 3, 4]"),
    (["calculator", "--host", "no-such-host.invalid"], "error: --host 'no-such-host.invalid' cannot be resolved"),
]


@pytest.mark.parametrize(("args", "says"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_and_a_nonzero_exit(tmp_path: Path, args: list[str], says: str) -> None:
    result = run_cli("env", "serve", *args, "--port", "0", "--workspace", str(tmp_path / "ws"), timeout=120)
    assert result.returncode == 2 and result.stderr.startswith(says) and result.stderr.count("\n") == 1
    assert not (tmp_path / "ws").exists(), "nothing is written"


def test_a_busy_port_is_one_line_naming_it(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("env", "serve", "calculator", "--port", str(port), "--workspace", str(tmp_path), timeout=120)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"error: port {port} on 127.0.0.1 is in use; choose another with --port")


def test_the_readme_trl_environment_sees_the_served_tools_and_gets_the_bootcamps_reward(
    servers: dict[str, str], tmp_path: Path
) -> None:
    from transformers.utils import get_json_schema

    code = _readme_snippet(servers["calculator"], model=None)
    namespace: dict[str, Any] = {}
    exec(compile(code, "serving-and-teachers.md", "exec"), namespace)  # the class and its imports, no training
    environment = namespace["Calculator"]()
    bootcamp = registry.make("calculator")
    tools = environment.client.reset().observation["tools"]
    assert [get_json_schema(getattr(environment, t["function"]["name"])) for t in tools] == tools
    for seed in range(4):  # as TRL plays it: reset with the row, then tool methods with the model's arguments
        task = environment.reset(prompt=[])
        local = _instance(bootcamp, environment.client.state())
        assert task == content_text(bootcamp.prompt(local)[-1]["content"])
        state = bootcamp.new_state(local)
        transcript = bootcamp.prompt(local)
        while environment.get_reward() == 0.0 and not state.finished:
            action = bootcamp.demonstrate(local, state, transcript)
            said = getattr(environment, action.name)(**action.arguments)
            _mirror(bootcamp, local, state, action)
            transcript += [_assistant(action, len(transcript)), {"role": "tool", "content": said}]
        assert environment.get_reward() == 1.0, f"seed {seed}"


def test_the_readme_snippet_trains_a_grpo_step_on_a_served_bootcamp(
    servers: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from campflow.config import TinyModelConfig
    from campflow.training.tinymodel import build_tiny_model

    model = tmp_path / "tiny"
    build_tiny_model(model, TinyModelConfig(corpus_per_level=4, pretrain={"steps": 0}), ["calculator"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    namespace: dict[str, Any] = {}
    exec(compile(_readme_snippet(servers["calculator"], model=model), "serving-and-teachers.md", "exec"), namespace)
    steps = [h for h in namespace["trainer"].state.log_history if "step_time" in h]
    assert [h["step"] for h in steps] == [1] and "rewards/Calculator/mean" in steps[0]  # TRL read get_reward


class _Recording(NoisyOraclePolicy):
    """The noisy oracle, keeping every reply it gives."""

    def __init__(self) -> None:
        super().__init__(p_wrong_move=0.2, p_malformed=0.3, p_wrong_answer=0.3, seed=5)
        self.replies: list[PolicyReply] = []

    async def respond(self, messages: Any, tools: Any, context: Any) -> PolicyReply:
        reply = await super().respond(messages, tools, context)
        self.replies.append(reply)
        return reply


@pytest.mark.parametrize("name", ["calculator", "maze", "filesystem"])
def test_a_stepped_episode_is_the_engines_episode_reply_for_reply(name: str) -> None:
    bootcamp = registry.make(name)
    for instance in train_instances(bootcamp, 8, seed=1):
        policy = _Recording()
        engine = asyncio.run(run_episode(EpisodeSpec(bootcamp, instance), policy))
        stepped = SteppedEpisode(bootcamp, instance)
        said = [*stepped.prompt]
        for reply in policy.replies:
            said += [{"role": "assistant"}, *stepped.reply(reply).messages]
        assert stepped.done and stepped.episode is not None
        ended = stepped.episode
        assert (ended.reward, ended.termination, ended.turns, ended.tool_calls, ended.invalid_calls) == (
            engine.reward,
            engine.termination,
            engine.turns,
            engine.tool_calls,
            engine.invalid_calls,
        )
        assert ended.transcript == engine.transcript
        assert [m for m in said if m["role"] != "assistant"] == [
            m for m in engine.transcript if m["role"] != "assistant"
        ]


# -- helpers -----------------------------------------------------------------------------------------


class _Game:
    """One served episode, with a copy of its world kept here for the demonstrator to read."""

    def __init__(self, env: Any, bootcamp: Bootcamp, seed: int, level: int) -> None:
        self.env, self.bootcamp = env, bootcamp
        first = env.reset(seed=seed, level=level)
        self.instance = _instance(bootcamp, env.state())
        assert first.observation["instance_id"] == self.instance.id
        assert first.observation["messages"] == json.loads(json.dumps(bootcamp.prompt(self.instance)))
        assert first.observation["tools"] == bootcamp.tool_schemas(self.instance)
        self.state = bootcamp.new_state(self.instance)
        self.transcript: list[dict[str, Any]] = list(first.observation["messages"])
        self.done, self.reward, self.termination = False, 0.0, None

    def step(self, action: dict[str, Any]) -> Any:
        """Send ``action`` as it is; the transcript gets the server's answer."""
        answer = self.env.step(action)
        self.transcript += [
            {"role": "assistant", "content": action.get("content", "")},
            *answer.observation["messages"],
        ]
        self._end(answer)
        return answer

    def play(self, action: Action) -> None:
        """Send a bootcamp action as a tool call, and play it on the copy of the world too."""
        answer = self.env.step({"tool": action.name, "arguments": action.arguments})
        _mirror(self.bootcamp, self.instance, self.state, action)
        self.transcript += [_assistant(action, len(self.transcript)), *answer.observation["messages"]]
        self._end(answer)

    def _end(self, answer: Any) -> None:
        self.done, self.reward, self.termination = answer.done, answer.reward, answer.observation["termination"]


def _play_demonstrator(env: Any, bootcamp: Bootcamp, seed: int, level: int) -> tuple[float, str | None]:
    game = _Game(env, bootcamp, seed, level)
    while not game.done:
        game.play(bootcamp.demonstrate(game.instance, game.state, game.transcript))
    assert game.instance.seed < EVAL_SEED_BASE
    return game.reward, game.termination


def _instance(bootcamp: Bootcamp, state: dict[str, Any]) -> Instance:
    """The instance the server says it serves, rebuilt here from its level and seed."""
    instance = bootcamp.generate(state["level"], state["seed"])
    assert instance.id == state["instance_id"]
    return instance


def _mirror(bootcamp: Bootcamp, instance: Instance, state: Any, action: Action) -> None:
    try:
        bootcamp.apply(instance, state, action)
    except ToolError:  # refused by the world: unchanged, as on the server
        pass


def _assistant(action: Action, turn: int) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [native_call(action, f"call_{turn}")]}


def _readme_snippet(url: str, model: Path | None) -> str:
    """The guide's TRL snippet, pointed at ``url`` and ``model`` (None: everything but the training)."""
    section = (REPO / "docs" / "serving-and-teachers.md").read_text().split("## Training elsewhere", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    assert '"http://127.0.0.1:8000"' in code and '"Qwen/Qwen3-0.6B"' in code
    code = code.replace('"http://127.0.0.1:8000"', repr(url)).replace('"Qwen/Qwen3-0.6B"', repr(str(model)))
    return code if model is not None else code.split("\nsystem = ", 1)[0]


def _served(servers: dict[str, str], name: str) -> str:
    if name not in servers:
        pytest.skip("reasoning-gym is not installed (the adapters extra)")
    return servers[name]


def _has_reasoning_gym() -> bool:
    try:
        import reasoning_gym  # noqa: F401
    except ImportError:
        return False
    return True


def _workspace(path: Path) -> Any:
    from campflow.storage.workspace import Workspace

    return Workspace(path)


def _start(name: str, workspace: Path) -> subprocess.Popen[str]:
    exe = Path(sys.executable).parent / "campflow"
    return subprocess.Popen(
        [str(exe), "env", "serve", name, "--port", "0", "--workspace", str(workspace)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "300"},
    )


def _ready(proc: subprocess.Popen[str]) -> str:
    """The URL a starting server prints once it accepts connections."""
    line = proc.stdout.readline()  # the first line, or "" when the process died first
    found = re.search(r" at (http://\S+) ", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"the server did not start: {line}{proc.communicate()[1]}")
    return found.group(1)


def _stop(proc: subprocess.Popen[str]) -> tuple[int, str]:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err
