"""The workspace: one folder, its store, and every bootcamp a name can mean there.

Every command, flow and task that needs the store or a bootcamp opens the workspace first::

    ws = Workspace.from_config(cfg)       # or Workspace("campflow-data")
    ws.store                              # the Store (created on first use)
    ws.bootcamp("rg-gcd")                 # built-in, registered by your code, or imported here
    ws.names("calculator,rg-gcd")         # validated names (``all``: every one)

Names resolve in the registry; a name it does not hold (or ``all``) makes the workspace load the
bootcamps imported into its store (``campflow import``, :mod:`campflow.storage.imports`), once and only
then, so commands on built-in bootcamps never read the store for it. Anything else is an
:class:`~campflow.errors.UnknownBootcampError` naming every known bootcamp.

Opening a workspace also installs it as the registry's resolver
(:func:`campflow.bootcamps.registry.set_resolver`): code below it that holds only a name -- rebuilding
an episode's instance, a TRL environment, a synthesizer -- resolves imported bootcamps through this
same path with a plain ``registry.make``, and a new command cannot forget to load them. A process
works in one workspace at a time: the one opened (or used) last resolves. Rollout workers in other
processes (Ray) open none; the flow ships them the specs of the imports they may meet
(:mod:`campflow.flows.rollouts`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from campflow.bootcamps import registry
from campflow.bootcamps.base import Bootcamp

if TYPE_CHECKING:
    from campflow.config import CampflowConfig
    from campflow.storage.store import Store

DB_NAME = "campflow.duckdb"

# the store whose record the registry's loaded imports came from, and their names: opening a workspace
# on another store drops them, so a name imported elsewhere does not resolve there
_loaded_from: Path | None = None
_loaded_names: set[str] = set()


class Workspace:
    """A campflow workspace: its folder, its store and the bootcamps it can name.

    Args:
        path: the workspace folder (store, datasets, checkpoints, reports).
        db: the store's file, if not ``<path>/campflow.duckdb``.
        lock_wait_s: how long a write waits for a reader or another writer to let go of the file.
    """

    def __init__(self, path: str | Path, *, db: str | Path | None = None, lock_wait_s: float = 60.0) -> None:
        self.path = Path(path)
        self.db_path = Path(db) if db is not None else self.path / DB_NAME
        self.lock_wait_s = lock_wait_s
        self._store: Store | None = None
        self._loaded = False
        self._install()

    @classmethod
    def from_config(cls, cfg: CampflowConfig) -> Workspace:
        """The workspace ``cfg.workspace`` describes."""
        return cls(cfg.workspace.path, db=cfg.workspace.db_path, lock_wait_s=cfg.workspace.lock_wait_s)

    def __repr__(self) -> str:
        return f"Workspace({str(self.path)!r}, db={str(self.db_path)!r})"

    @property
    def store(self) -> Store:
        """The workspace's store, created and migrated on first use."""
        if self._store is None:
            from campflow.storage.store import Store  # DuckDB is imported only when a store is used

            self._store = Store(self.db_path, lock_wait_s=self.lock_wait_s)
        return self._store

    def bootcamp(self, name: str) -> Bootcamp:
        """The bootcamp ``name`` means in this workspace.

        Raises:
            UnknownBootcampError: neither registered nor imported here; the message lists known names.
        """
        self._resolve_here()
        return registry.make(name)

    def names(self, spec: str | list[str] = "all") -> list[str]:
        """``"calculator,rg-gcd"`` (a list, or ``all``) as validated bootcamp names.

        Raises:
            UnknownBootcampError: for the first name that is neither registered nor imported here.
        """
        self._resolve_here()
        return registry.parse_names(spec)

    def bootcamps(self, spec: str | list[str] = "all") -> list[Bootcamp]:
        """The bootcamps :meth:`names` names, built."""
        return [self.bootcamp(name) for name in self.names(spec)]

    def entries(self) -> list[registry.Entry]:
        """Every registry entry this workspace can name, its imports loaded (for listings)."""
        self._resolve_here()
        self.load_imports()
        return registry.entries()

    def load_imports(self) -> None:
        """Register the bootcamps imported into this workspace: once per workspace, and not at all while
        it has no store (nothing can have been imported)."""
        global _loaded_from, _loaded_names
        if self._loaded or (self._store is None and not self.db_path.exists()):
            return
        from campflow.storage.imports import register_recorded

        here = {spec.name for spec in register_recorded(self.store)}
        _drop(_loaded_names - here)  # removed from the record since it was loaded
        _loaded_from, _loaded_names = self.db_path.absolute(), here
        self._loaded = True

    def _resolve_here(self) -> None:
        # another workspace opened since took the resolver (and may have dropped our imports): take it back
        if registry.current_resolver() != self.load_imports:
            self._install()

    def _install(self) -> None:
        global _loaded_from, _loaded_names
        if _loaded_from is not None and _loaded_from != self.db_path.absolute():
            _drop(_loaded_names)
            _loaded_from, _loaded_names = None, set()
        self._loaded = False
        registry.set_resolver(self.load_imports, f"the workspace {self.path.absolute()}")


def _drop(names: set[str]) -> None:
    """Unregister the imported bootcamps among ``names`` (never a built-in or user one of that name)."""
    for entry in registry.entries():
        if entry.name in names and entry.origin == "imported":
            registry.unregister(entry.name)
