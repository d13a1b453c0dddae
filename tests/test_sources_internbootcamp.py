"""InternBootcamp's own shapes: a package written here in its layout always runs; the real repository when given.

The fixture copies what the real classes do that broke the adapter: ``Game24bootcamp`` builds its own
``numpy.random.default_rng(seed)`` from a ``seed`` constructor argument; the Codeforces-derived classes
import ``from bootcamp import Basebootcamp``, carry their problem statement in the module docstring and
have ``solve(n, p)``-style helpers; levels come from ``examples/pipelines/puzzle_configs/*.json``.

The real repository: set ``CAMPFLOW_INTERNBOOTCAMP`` to a checkout of github.com/InternLM/InternBootcamp
whose requirements are installed (``pip install -e CHECKOUT``); those tests skip without it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from campflow.agents.oracle import OraclePolicy
from campflow.bootcamps import registry
from campflow.bootcamps.base import Action
from campflow.errors import ImportSourceError
from campflow.rollout.engine import EpisodeSpec, run_episodes
from campflow.rollout.episode import Termination
from campflow.sources import ImportSpec, build_bootcamp
from campflow.sources.class_sources import read_levels_file
from campflow.storage.imports import import_bootcamp

BASE = '''
class Basebootcamp:
    """
    Base class for bootcamp implementations.

    A bootcamp is a class that contains the logic to verify the solution of a task.
    """

    @classmethod
    def verify_score(cls, model_output, identity, format_score=0, short_penalty=True, short_threshold=100,
                     format_penalty=True):
        if short_penalty and len(model_output) < short_threshold:
            return 0.0
        if format_penalty and "</think>" not in model_output:
            return 0.0
        solution = cls.extract_output(model_output)
        if solution is None:
            return 0.0
        return 1.0 if cls._verify_correction(solution, identity) else format_score
'''
GAME = '''
import re

import numpy as np

from internbootcamp.bootcamp.base import Basebootcamp


class Game24bootcamp(Basebootcamp):
    def __init__(self, num_numbers=4, range_max=100, seed=None):
        self.num_numbers = num_numbers
        self.range_max = range_max
        self.rng = Maker(seed)

    def case_generator(self):
        numbers = sorted(int(n) for n in self.rng.rng.integers(1, self.range_max, size=self.num_numbers))
        return {"puzzle": " ".join(map(str, numbers)), "target": sum(numbers)}

    def prompt_func(self, identity):
        return f"Use {identity['puzzle']} with + - * / to make {identity['target']}; answer in \\\\boxed{{}}."

    @staticmethod
    def extract_output(output):
        found = re.findall(r"\\\\boxed\\{(.*?)\\}", output)
        return found[-1] if found else None

    @classmethod
    def _verify_correction(cls, solution, identity):
        used = sorted(re.findall(r"\\d+", solution))
        return used == sorted(identity["puzzle"].split()) and eval(solution) == identity["target"]


class Maker:
    """Like Game24Plus: the generator lives one object deeper than the bootcamp's attributes."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
'''
CODEFORCES = '''"""#

### 谜题描述
Given n integers, print their sum modulo p.

Input

The first line contains n and p.

Here is a reference code to solve this task.
```python
print(sum(map(int, input().split())) % p)
```

请完成上述谜题的训练场环境类实现，包括所有必要的方法。
"""

import random
import re

from bootcamp import Basebootcamp


class Csummodpbootcamp(Basebootcamp):
    def __init__(self, max_n=6, p=7):
        self.max_n, self.p = max_n, p

    def case_generator(self):
        numbers = [random.randint(0, 50) for _ in range(random.randint(1, self.max_n))]
        return {"numbers": numbers, "p": self.p, "ans": self.solve(numbers, self.p)}

    @staticmethod
    def prompt_func(identity):
        return f"Sum {identity['numbers']} modulo {identity['p']}; answer as [answer]x[/answer]."

    @staticmethod
    def solve(n, p):
        return sum(n) % p

    @staticmethod
    def extract_output(output):
        found = re.findall(r"\\[answer\\](.*?)\\[/answer\\]", output)
        return found[-1].strip() if found else None

    @classmethod
    def _verify_correction(cls, solution, identity):
        return solution == str(identity["ans"])
'''
LEVELS = [
    {"num_numbers": 3, "range_max": 10},
    {"num_numbers": 4, "range_max": 10, "target_max": 35},
    {"num_numbers": 5, "range_max": 10, "target_max": 40},
]


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    """A package in InternBootcamp's layout, importable as ``internbootcamp`` (its own copy per test)."""
    root = tmp_path / "InternBootcamp"
    files = {
        "internbootcamp/__init__.py": "from .bootcamp import *\n",
        "internbootcamp/bootcamp/__init__.py": "from .base import Basebootcamp\n"
        "from .game24.game_default import Game24bootcamp\n",
        "internbootcamp/bootcamp/base.py": BASE,
        "internbootcamp/bootcamp/game24/game_default.py": GAME,
        "internbootcamp/bootcamp/csummodp/csummodp.py": CODEFORCES,
        "examples/pipelines/puzzle_configs/game24_train.json": json.dumps(LEVELS),
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.startswith(str(tmp_path.parent))])
    monkeypatch.syspath_prepend(str(root))
    return root


@pytest.fixture(autouse=True)
def own_package_modules():
    """Each test imports its own ``internbootcamp`` and ``bootcamp``: none are left to the next test."""

    def ours() -> list[str]:
        return [
            m
            for m in sys.modules
            if m.split(".")[0] in ("internbootcamp", "bootcamp") or m.startswith("campflow_imported_")
        ]

    saved = {m: sys.modules.pop(m) for m in ours()}
    yield
    for module in ours():
        del sys.modules[module]
    sys.modules.update(saved)


@pytest.fixture(autouse=True)
def forget_imports():
    before = set(registry.names())
    yield
    for name in set(registry.names()) - before:
        registry.unregister(name)


def ib(source: str, **options):
    return build_bootcamp(ImportSpec(name="ib-test", adapter="internbootcamp", source=source, options=options))


def identities_in_a_fresh_process(source: str, root: Path, hash_seed: str) -> list:
    code = (
        "import json, sys\nfrom campflow.sources import ImportSpec, build_bootcamp\n"
        "b = build_bootcamp(ImportSpec(name='ib-test', adapter='internbootcamp', source=sys.argv[1]))\n"
        "print(json.dumps([b.generate(lv, s).data['identity'] for lv in (1, 3) for s in range(4)]))\n"
    )
    env = {
        **os.environ,
        "PYTHONHASHSEED": hash_seed,
        "PYTHONPATH": os.pathsep.join([str(root), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]),
    }
    out = subprocess.run([sys.executable, "-c", code, source], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout)


def test_a_seed_argument_gets_each_instances_seed_so_one_id_is_one_puzzle(checkout: Path) -> None:
    b = ib("internbootcamp:Game24bootcamp")
    assert "seed" not in b.params_model.model_fields, "the seed is campflow's, not a knob"
    here = [b.generate(lv, s).data["identity"] for lv in (1, 3) for s in range(4)]
    assert here == [b.generate(lv, s).data["identity"] for lv in (1, 3) for s in range(4)]
    assert len({json.dumps(i) for i in here}) == len(here), "seeds differ, puzzles differ"
    assert identities_in_a_fresh_process("internbootcamp:Game24bootcamp", checkout, "7") == here
    with pytest.raises(ImportSourceError, match="seed is set from each instance's seed"):
        ib("internbootcamp:Game24bootcamp", seed=3)


def test_the_summary_is_the_class_statement_never_the_inherited_base_docstring(checkout: Path) -> None:
    game = ib("internbootcamp:Game24bootcamp")
    assert game.describe_task().startswith("Solve the Game24 task posed in the user message.")
    cf = ib(f"{checkout}/internbootcamp/bootcamp/csummodp/csummodp.py:Csummodpbootcamp")
    assert cf.describe_task().startswith("Given n integers, print their sum modulo p.")
    for b in (game, cf):
        assert "Base class for bootcamp" not in b.describe_task() and "请完成" not in b.describe_task()


def test_a_codeforces_style_class_loads_from_its_file_path(checkout: Path) -> None:
    source = f"{checkout}/internbootcamp/bootcamp/csummodp/csummodp.py:Csummodpbootcamp"
    b = ib(source)
    instance = b.generate(2, 5)
    assert instance.data["identity"]["ans"] == sum(instance.data["identity"]["numbers"]) % 7
    assert str(checkout / "internbootcamp") in sys.path, "the folder `from bootcamp import` needs"
    assert identities_in_a_fresh_process(source, checkout, "3") == [
        b.generate(lv, s).data["identity"] for lv in (1, 3) for s in range(4)
    ]


def test_a_solve_helper_that_does_not_take_the_identity_is_not_taken_for_an_oracle(checkout: Path) -> None:
    b = ib(f"{checkout}/internbootcamp/bootcamp/csummodp/csummodp.py:Csummodpbootcamp")
    instance = b.generate(1, 0)
    with pytest.raises(ImportSourceError, match=r"solve\(n, p\) does not take the identity"):
        b.oracle(instance, b.new_state(instance))
    episode = asyncio.run(run_episodes([EpisodeSpec(b, instance)], OraclePolicy()))[0]
    assert episode.termination == Termination.INFRA_ERROR and "TypeError" not in (episode.error or "")
    state = b.new_state(instance)
    b.apply(instance, state, Action("submit", {"answer": f"[answer]{instance.data['identity']['ans']}[/answer]"}))
    assert b.score(instance, state, ()).success, "the class's own reference answer, in its format, scores 1"


def test_levels_come_from_an_internbootcamp_config_file_and_the_import_vets_them(checkout: Path, store) -> None:
    levels = read_levels_file(checkout / "examples/pipelines/puzzle_configs/game24_train.json")
    notes: list[str] = []
    spec, b = import_bootcamp(
        ImportSpec(
            name="ib-game24",
            adapter="internbootcamp",
            source="internbootcamp:Game24bootcamp",
            options={"levels": levels},
        ),
        store,
        say=notes.append,
    )
    assert [b.levels[lv].num_numbers for lv in sorted(b.levels)] == [3, 4, 5]
    assert any(
        "does not take target_max; dropped as InternBootcamp's own data generator drops them" in n for n in notes
    )
    assert spec.options["levels"] == levels, "the file's content is on record, not its path"
    assert [len(b.generate(lv, 0).data["identity"]["puzzle"].split()) for lv in (1, 2, 3)] == [3, 4, 5]


def test_a_levels_file_that_is_not_a_list_of_objects_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text('{"num_numbers": 4}')
    with pytest.raises(ImportSourceError, match="expected a JSON list of objects of constructor arguments"):
        read_levels_file(tmp_path / "bad.json")


# -- the real repository ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_checkout() -> Path:
    root = os.environ.get("CAMPFLOW_INTERNBOOTCAMP")
    if not root:
        pytest.skip("set CAMPFLOW_INTERNBOOTCAMP to an InternBootcamp checkout to run the tests on its classes")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    probe = subprocess.run([sys.executable, "-c", "import internbootcamp"], capture_output=True, text=True, env=env)
    if probe.returncode:
        pytest.skip(
            f"cannot import internbootcamp from {root} (pip install -e it): "
            f"{probe.stderr.strip().splitlines()[-1] if probe.stderr.strip() else probe.returncode}"
        )
    return Path(root)


@pytest.fixture
def real_on_path(real_checkout: Path, monkeypatch) -> Path:
    monkeypatch.syspath_prepend(str(real_checkout))
    return real_checkout


def test_real_game24bootcamp_imports_deterministically_with_its_own_levels(real_on_path: Path, store) -> None:
    levels = read_levels_file(real_on_path / "examples/pipelines/puzzle_configs/game24_train.json")
    spec, b = import_bootcamp(
        ImportSpec(
            name="ib-Game24",
            adapter="internbootcamp",
            source="internbootcamp:Game24bootcamp",
            options={"levels": levels},
        ),
        store,
    )
    assert [b.levels[lv].num_numbers for lv in sorted(b.levels)] == [4, 5, 6]
    assert "Base class for bootcamp" not in b.describe_task()
    here = [b.generate(lv, s).data["identity"] for lv in (1, 3) for s in range(4)]
    assert len({json.dumps(i) for i in here}) == len(here)


def test_real_codeforces_class_imports_from_its_file_with_its_statement(real_on_path: Path, store) -> None:
    name = "aalmostarithmeticalprogression"
    source = f"{real_on_path}/internbootcamp/bootcamp/{name}/{name}.py:Aalmostarithmeticalprogressionbootcamp"
    _, b = import_bootcamp(ImportSpec(name="ib-aap", adapter="internbootcamp", source=source), store)
    assert b.describe_task().startswith("Gena loves sequences of numbers.")
