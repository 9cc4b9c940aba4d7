"""The package's rooms import one way: cli -> ops -> delivery -> capture,
schema -> db, with the top-level public modules as leaves everyone may use.
Read from the source with ast, so the test needs no database."""

from __future__ import annotations

import ast
from pathlib import Path

import subscriptions

PACKAGE = Path(subscriptions.__file__).parent
LEAVES = {"errors", "events", "hookspecs", "config", "logs"}
# What each room may import besides itself and the leaves.
ALLOWED = {
    "db": set(),
    "schema": {"db"},
    "capture": {"db"},
    "plugins": {"capture", "hookspecs"},
    "testing": {"plugins"},
    "delivery": {"db", "schema", "capture", "plugins"},
    "ops": {"db", "schema", "capture", "plugins", "delivery"},
    "web": {"db", "schema", "capture", "ops"},
    "cli": {"db", "schema", "capture", "plugins", "delivery", "ops", "web"},
    "__init__": set(),
    "__main__": {"cli"},
    **{leaf: set() for leaf in LEAVES},
}


def _room(module: str) -> str:
    """``subscriptions.delivery.worker`` -> ``delivery``; the package itself -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> set[str]:
    """The subscriptions.* modules a file imports, relative imports resolved."""
    module = ".".join(("subscriptions", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                name = f"{base}.{node.module}" if node.module else base
            else:
                name = node.module or ""
            found.add(name)
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] == "subscriptions" and name != "subscriptions"}


def _source_files() -> list[Path]:
    return sorted(path for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts)


def _violations(room: str, imported: set[str]) -> list[str]:
    allowed = ALLOWED[room] | LEAVES | {room}
    public = {"subscriptions.hookimpl", "subscriptions.__version__"}
    return sorted(name for name in imported if _room(name) not in allowed and name not in public)


def test_rooms_import_one_way() -> None:
    wrong = []
    for path in _source_files():
        room = _room(".".join(("subscriptions", *path.relative_to(PACKAGE).with_suffix("").parts)))
        wrong += [f"{path.relative_to(PACKAGE)} imports {name}" for name in _violations(room, _imports(path))]
    assert wrong == []


def test_every_room_says_what_lives_there_and_what_it_may_import() -> None:
    for init in PACKAGE.glob("*/__init__.py"):
        docstring = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "Lives here" in docstring and "May import" in docstring, init


def test_no_module_shadows_the_standard_library() -> None:
    import sys

    names = {path.stem for path in _source_files()} - {"__init__", "__main__"}
    assert names.isdisjoint(sys.stdlib_module_names), names & sys.stdlib_module_names


def test_the_check_sees_imports_against_the_direction() -> None:
    assert _violations("db", {"subscriptions.delivery.worker"}) == ["subscriptions.delivery.worker"]
    assert _violations("capture", {"subscriptions.cli"}) == ["subscriptions.cli"]
    assert _violations("cli", {"subscriptions.db.sql", "subscriptions.delivery.worker"}) == []
    # Relative imports are resolved: capture/metadata.py uses .names and subscriptions.db.
    assert {"subscriptions.capture.names", "subscriptions.db"} <= _imports(PACKAGE / "capture" / "metadata.py")
