"""Finding handler plugins and collecting their handlers by tag.

Plugins come from three places: the built-ins in ``plugins/``, installed
packages exposing the entry-point group ``subscriptions``, and modules or
``.py`` files named with ``--plugin`` / ``SUBS_PLUGINS``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

import pluggy

from subscriptions import hookspecs
from subscriptions.capture.names import TAG_PATTERN, TAG_RULE, check_tag
from subscriptions.errors import SubsError

ENTRY_POINT_GROUP = "subscriptions"
PLUGINS_ENV = "SUBS_PLUGINS"
BUILTIN_PLUGINS = ("log", "webhook", "send_email", "exec", "nats_relay")
# The tags they register, each only when the config names it.
BUILTIN_TAGS = ("exec", "log", "nats", "send_email", "webhook")
BUILTIN_PREFIX = "builtin:"


class Register(Protocol):
    """The ``register`` callback a plugin's ``register_handlers`` gets."""

    def __call__(
        self, tag: str, function: Callable[..., object], *, transactional: bool = False, batch: bool = False
    ) -> None: ...


@dataclass(frozen=True)
class Handler:
    tag: str
    function: Callable[..., object]
    plugin: str
    transactional: bool = False
    batch: bool = False


def _is_path(spec: str) -> bool:
    """Whether a plugin spec names a file (else a module)."""
    if spec.endswith(".py") or "/" in spec:
        return True
    try:
        return Path(spec).is_file()
    except OSError:  # a name too long for a file, say
        return False


def _import(spec: str) -> ModuleType:
    """A module by dotted name, or a ``.py`` file by path."""
    path = Path(spec)
    try:
        if _is_path(spec):
            if not path.is_file():
                raise SubsError(f"plugin {spec}: no such file")
            name = f"subs_plugin_{path.stem}"
            module_spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(module_spec)  # type: ignore[arg-type]
            sys.modules[name] = module
            module_spec.loader.exec_module(module)  # type: ignore[union-attr]
            return module
        return importlib.import_module(spec)
    except SubsError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and (spec == exc.name or spec.startswith(exc.name + ".")):
            raise SubsError(f"plugin {spec}: no such module or file") from None
        raise SubsError(f"plugin {spec} failed to import: {type(exc).__name__}: {exc}") from None
    except Exception as exc:
        raise SubsError(f"plugin {spec} failed to import: {type(exc).__name__}: {exc}") from None


def plugin_specs(given: Iterable[str] = ()) -> tuple[str, ...]:
    """--plugin values, then SUBS_PLUGINS (separated like PATH), each file
    once however it is written (``p.py``, ``./p.py``): loaded twice, its
    tags were refused as registered by two plugins."""
    from_env = [spec for spec in os.environ.get(PLUGINS_ENV, "").split(os.pathsep) if spec]
    unique: dict[str, str] = {}
    for spec in [*given, *from_env]:
        unique.setdefault(str(Path(spec).resolve()) if _is_path(spec) else spec, spec)
    return tuple(unique.values())


def plugin_manager(extra: Iterable[str] = ()) -> pluggy.PluginManager:
    """Built-ins, then entry points, then ``extra`` modules/paths."""
    manager = pluggy.PluginManager("subscriptions")
    manager.add_hookspecs(hookspecs)
    for name in BUILTIN_PLUGINS:
        manager.register(importlib.import_module(f"subscriptions.builtin.{name}"), name=BUILTIN_PREFIX + name)
    try:
        manager.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    except Exception as exc:
        raise SubsError(f"an installed subs plugin failed to load: {type(exc).__name__}: {exc}") from None
    for spec in extra:
        if spec and manager.get_plugin(spec) is None:
            _register(manager, _import(spec), spec)
    _refuse_unknown_hooks(manager)
    return manager


def _refuse_unknown_hooks(manager: pluggy.PluginManager) -> None:
    """A hook implementation subs does not call (``register_handler`` for
    ``register_handlers``) is an error: pluggy would ignore it, and the tags
    it meant to register would be missing without a word."""
    try:
        manager.check_pending()
    except pluggy.PluginValidationError as exc:
        plugin = manager.get_name(exc.plugin) or repr(exc.plugin)
        named = re.search(r"unknown hook '([^']+)'", str(exc))
        hook = named.group(1) if named else str(exc)
        known = [name for name in dir(hookspecs) if not name.startswith("_") and hasattr(manager.hook, name)]
        raise SubsError(
            f"plugin {plugin} implements {hook}, which is not a subs hook ({', '.join(known)}); check its spelling"
        ) from None


def _register(manager: pluggy.PluginManager, module: ModuleType, spec: str) -> None:
    """Register a plugin named with --plugin or SUBS_PLUGINS. A module
    already loaded (a built-in, an installed plugin) is not loaded twice.
    One that implements no hook is taken as it is: it may be loaded for
    what its import does."""
    if manager.is_registered(module):
        return
    try:
        manager.register(module, name=spec)
    except pluggy.PluginValidationError as exc:
        reason = str(exc).strip().splitlines()[-1]
        raise SubsError(f"plugin {spec} does not fit subs's hooks: {reason}") from None


def unused_tables(handlers: Mapping[str, Handler], config: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """What to say of the ``[handlers.TAG]`` tables no loaded handler reads:
    a misspelt tag, or a plugin's table when that plugin was not loaded."""
    return [
        f"[handlers.{tag}] is read by no handler loaded here: a misspelt tag, or a plugin's table and that plugin "
        "was not loaded (--plugin, SUBS_PLUGINS)"
        for tag in sorted(config)
        if tag not in handlers
    ]


def collect_handlers(manager: pluggy.PluginManager, config: Mapping[str, Mapping[str, Any]]) -> dict[str, Handler]:
    """Ask every plugin for its handlers; two plugins claiming one tag is an error.

    Built-in handlers are opt-in: one is registered only when the config has a
    table for its tag or an alias using it, so they never take a tag (such as
    ``send_email``) away from your own plugins. A config table with
    ``use = "OTHER_TAG"`` makes a tag reuse another tag's handler with its own
    settings, e.g. a second webhook, or ``send_email`` events written by ``log``
    while trying things out.
    """
    handlers: dict[str, Handler] = {}
    configured = {table.get("use", tag) for tag, table in config.items()}
    for impl in manager.hook.register_handlers.get_hookimpls():
        plugin = manager.get_name(impl.plugin) or repr(impl.plugin)

        def register(
            tag: str, function: Callable[..., object], *, transactional: bool = False, batch: bool = False
        ) -> None:
            if plugin.startswith(BUILTIN_PREFIX) and tag not in configured:
                return
            check_tag(tag)
            if not callable(function):
                raise SubsError(f"{plugin} registers {tag!r} with {function!r}, which is not a function to call")
            if transactional and batch:
                raise SubsError(f"{plugin} registers {tag!r} as both transactional and batch; choose one")
            if tag in handlers:
                raise SubsError(
                    f"tag {tag!r} is registered by both {handlers[tag].plugin} and {plugin}; remove one of the plugins"
                )
            handlers[tag] = Handler(tag, function, plugin, transactional, batch)

        register.__qualname__ = "register"  # what a wrong call's TypeError names
        arguments = {"register": register, "config": config}
        try:
            impl.function(**{name: arguments[name] for name in impl.argnames})
        except SubsError:
            raise
        except Exception as exc:
            raise SubsError(f"plugin {plugin} failed to register its handlers: {type(exc).__name__}: {exc}") from None
    for tag, table in config.items():
        if not TAG_PATTERN.fullmatch(tag):  # a table no subscription could ever use
            raise SubsError(f"[handlers.{tag}]: {tag!r} is not a tag; name the table after one: {TAG_RULE}")
        target = table.get("use")
        if target is None:
            continue
        if target == tag:
            raise SubsError(f"[handlers.{tag}] uses its own tag; remove use, or name another handler")
        if "use" in config.get(target, {}):
            handler = config[target]["use"]
            if handler == tag:
                raise SubsError(f"[handlers.{tag}] and [handlers.{target}] use each other; one must name a handler")
            raise SubsError(f"[handlers.{tag}] uses {target!r}, itself an alias: write use = {handler!r}")
        if target not in handlers:
            raise SubsError(f"[handlers.{tag}] uses {target!r}, but no plugin registers that tag")
        if tag in handlers:
            raise SubsError(
                f"[handlers.{tag}] sets use = {target!r}, but {handlers[tag].plugin} already registers {tag!r}"
            )
        check_tag(tag)
        base = handlers[target]
        handlers[tag] = Handler(tag, base.function, f"{base.plugin} (as {tag})", base.transactional, base.batch)
    return handlers
