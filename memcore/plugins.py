"""What plugins register: the stores and embedders behind :func:`open_store` and :func:`open_embedder`.

Each registration hook is called plugin by plugin on the manager that
:mod:`memcore.plugin_manager` loads, so that every registration knows its plugin
and two plugins claiming one URL scheme or embedder name are a conflict, not a
silent override.

Environment variables:

``MEMCORE_STORE``
    The store :func:`open_store` opens when given no URL.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pluggy

from memcore.embedders.base import Embedder
from memcore.errors import InvalidInputError, PluginError, UnknownPluginError
from memcore.plugin_manager import LOAD_PLUGINS_ENV, get_plugin_manager
from memcore.store import BaseStore, Store

STORE_URL_ENV = "MEMCORE_STORE"

STORE_PACKAGES: dict[str, str] = {
    "qdrant": "memcore-qdrant",
    "qdrant+memory": "memcore-qdrant",
    "qdrant+http": "memcore-qdrant",
    "qdrant+https": "memcore-qdrant",
    "chroma": "memcore-chroma",
    "chroma+memory": "memcore-chroma",
    "chroma+http": "memcore-chroma",
    "chroma+https": "memcore-chroma",
    "postgresql": "memcore-pgvector",
    "postgres": "memcore-pgvector",
}
"""The package to install for each URL scheme that memcore's own plugins provide."""

EMBEDDER_PACKAGES: dict[str, str] = {"sentence-transformers/": "memcore[st]"}
"""The package to install for embedder names starting with each prefix."""

_SCHEME = re.compile(r"[a-z][a-z0-9+.-]*")
_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


@dataclass(frozen=True)
class StoreRegistration:
    """A store class registered for one URL scheme.

    :param scheme: the URL scheme, such as ``"jsonl"``.
    :param store_class: the class whose ``from_url`` opens such URLs.
    :param plugin: the name of the plugin that registered it.
    """

    scheme: str
    store_class: type[BaseStore]
    plugin: str

    @property
    def key(self) -> str:
        """What the registration is looked up by: its scheme."""
        return self.scheme


@dataclass(frozen=True)
class EmbedderRegistration:
    """An embedder factory registered under a name.

    :param name: what callers pass to :func:`open_embedder`.
    :param factory: called with the caller's options, returns the embedder.
    :param plugin: the name of the plugin that registered it.
    """

    name: str
    factory: Callable[..., Embedder]
    plugin: str

    @property
    def key(self) -> str:
        """What the registration is looked up by: its name."""
        return self.name


_Registration = TypeVar("_Registration", StoreRegistration, EmbedderRegistration)


@dataclass(frozen=True)
class PluginInfo:
    """One loaded plugin, as ``memcore plugins`` shows it.

    :param name: the name it is registered under (its entry-point name).
    :param distribution: the installed distribution providing it; ``None`` for built-ins.
    :param version: that distribution's version; ``None`` for built-ins.
    :param hooks: the hooks it implements, sorted.
    :param stores: URL scheme to the qualified name of the store class registered for it.
    :param embedders: embedder name to the qualified name of its factory.
    """

    name: str
    distribution: str | None
    version: str | None
    hooks: tuple[str, ...]
    stores: dict[str, str]
    embedders: dict[str, str]

    def as_dict(self) -> dict[str, Any]:
        """The info as JSON-ready data."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": list(self.hooks),
            "stores": dict(self.stores),
            "embedders": dict(self.embedders),
        }


def _hook_calls(manager: pluggy.PluginManager, hook_name: str) -> list[tuple[str, pluggy.HookCaller]]:
    """For each plugin implementing ``hook_name``, its name and a caller of its implementation only.

    Calling plugins one at a time is how the registry knows who registered what.
    """
    plugins = [(name, plugin) for name, plugin in manager.list_name_plugin() if plugin is not None]
    calls = []
    for name, plugin in plugins:
        if hook_name not in {caller.name for caller in manager.get_hookcallers(plugin) or ()}:
            continue
        others = [other for _, other in plugins if other is not plugin]
        calls.append((name, manager.subset_hook_caller(hook_name, remove_plugins=others)))
    return calls


def _call_registration_hook(
    plugin_name: str, what: str, caller: pluggy.HookCaller, register: Callable[..., None]
) -> None:
    try:
        caller(register=register)
    except PluginError:
        raise
    except Exception as exc:
        raise PluginError(
            f"the memcore plugin {plugin_name!r} failed while registering {what}: {exc!r}. "
            f"Upgrade or uninstall it, or leave it out with {LOAD_PLUGINS_ENV}"
        ) from exc


def _qualified_name(obj: object) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if module is None or qualname is None:
        return repr(obj)
    return f"{module}.{qualname}"


def _check_store_class(plugin_name: str, store_class: object) -> type[BaseStore]:
    if not (isinstance(store_class, type) and issubclass(store_class, BaseStore)):
        raise PluginError(
            f"the memcore plugin {plugin_name!r} registered {store_class!r} as a store; "
            "register a subclass of memcore.store.BaseStore"
        )
    if inspect.isabstract(store_class):
        missing = ", ".join(sorted(store_class.__abstractmethods__))
        raise PluginError(
            f"the memcore plugin {plugin_name!r} registered the store class {_qualified_name(store_class)}, "
            f"which leaves abstract methods unimplemented: {missing}"
        )
    name = getattr(store_class, "name", None)
    schemes = getattr(store_class, "schemes", None)
    if not isinstance(name, str) or not name:
        raise PluginError(
            f"the store class {_qualified_name(store_class)} of the memcore plugin {plugin_name!r} "
            "needs a class attribute name, a non-empty string"
        )
    if (
        not isinstance(schemes, tuple)
        or not schemes
        or not all(isinstance(scheme, str) and _SCHEME.fullmatch(scheme) for scheme in schemes)
    ):
        raise PluginError(
            f"the store class {_qualified_name(store_class)} of the memcore plugin {plugin_name!r} "
            f"declares schemes={schemes!r}; it needs a non-empty tuple of lowercase URL schemes "
            "such as ('qdrant', 'qdrant+http')"
        )
    return store_class


def _store_registrar(plugin_name: str, into: list[StoreRegistration]) -> Callable[[type[BaseStore]], None]:
    def register(store_class: type[BaseStore]) -> None:
        checked = _check_store_class(plugin_name, store_class)
        into.extend(StoreRegistration(scheme, checked, plugin_name) for scheme in checked.schemes)

    return register


def _embedder_registrar(
    plugin_name: str, into: list[EmbedderRegistration]
) -> Callable[[str, Callable[..., Embedder]], None]:
    def register(name: str, factory: Callable[..., Embedder]) -> None:
        if not isinstance(name, str) or not name or name != name.strip():
            raise PluginError(
                f"the memcore plugin {plugin_name!r} registered an embedder named {name!r}; "
                "names are non-empty strings without surrounding spaces"
            )
        if not callable(factory):
            raise PluginError(
                f"the memcore plugin {plugin_name!r} registered the embedder {name!r} with "
                f"{factory!r}, which is not callable; register a factory returning an Embedder"
            )
        into.append(EmbedderRegistration(name, factory, plugin_name))

    return register


def _store_registrations(manager: pluggy.PluginManager) -> list[StoreRegistration]:
    registrations: list[StoreRegistration] = []
    for plugin_name, caller in _hook_calls(manager, "memcore_register_stores"):
        _call_registration_hook(plugin_name, "stores", caller, _store_registrar(plugin_name, registrations))
    return registrations


def _embedder_registrations(manager: pluggy.PluginManager) -> list[EmbedderRegistration]:
    registrations: list[EmbedderRegistration] = []
    for plugin_name, caller in _hook_calls(manager, "memcore_register_embedders"):
        _call_registration_hook(
            plugin_name, "embedders", caller, _embedder_registrar(plugin_name, registrations)
        )
    return registrations


def _conflict(kind: str, key: str, first: str, second: str) -> PluginError:
    return PluginError(
        f"the {kind} {key!r} is registered by two plugins: {first} and {second}. "
        f"Uninstall one of them, or load only one with {LOAD_PLUGINS_ENV}"
    )


def _unique(
    kind: str, registrations: list[_Registration], target: Callable[[_Registration], object]
) -> dict[str, _Registration]:
    """Registrations by key, sorted; two different registrations of one key are a conflict."""
    registry: dict[str, _Registration] = {}
    for registration in registrations:
        known = registry.setdefault(registration.key, registration)
        if known != registration:
            raise _conflict(
                kind,
                registration.key,
                f"{known.plugin!r} ({_qualified_name(target(known))})",
                f"{registration.plugin!r} ({_qualified_name(target(registration))})",
            )
    return dict(sorted(registry.items()))


def store_classes() -> dict[str, StoreRegistration]:
    """Every URL scheme the loaded plugins can open, and who registered it.

    :returns: URL scheme to its registration, sorted by scheme.
    :raises PluginError: if two plugins (or two classes) claim the same scheme,
        or a plugin registers something that is not a store class.
    """
    registrations = _store_registrations(get_plugin_manager())
    return _unique("URL scheme", registrations, lambda r: r.store_class)


def embedder_factories() -> dict[str, EmbedderRegistration]:
    """Every embedder name the loaded plugins provide, and who registered it.

    :returns: embedder name to its registration, sorted by name.
    :raises PluginError: if two plugins (or two factories) claim the same name.
    """
    registrations = _embedder_registrations(get_plugin_manager())
    return _unique("embedder", registrations, lambda r: r.factory)


def plugin_infos() -> list[PluginInfo]:
    """Every loaded plugin with its distribution, hooks, stores and embedders.

    Unlike :func:`store_classes`, lists conflicting registrations rather than
    refusing them, so that the listing helps to find the conflict.

    :returns: one entry per plugin, built-ins first, then in loading order.
    """
    manager = get_plugin_manager()
    distributions = {id(plugin): dist for plugin, dist in manager.list_plugin_distinfo()}
    stores = _store_registrations(manager)
    embedders = _embedder_registrations(manager)
    infos = []
    for name, plugin in manager.list_name_plugin():
        if plugin is None:
            continue
        dist = distributions.get(id(plugin))
        infos.append(
            PluginInfo(
                name=name,
                distribution=None if dist is None else dist.project_name,
                version=None if dist is None else str(dist.version),
                hooks=tuple(sorted(caller.name for caller in manager.get_hookcallers(plugin) or ())),
                stores={r.scheme: _qualified_name(r.store_class) for r in stores if r.plugin == name},
                embedders={r.name: _qualified_name(r.factory) for r in embedders if r.plugin == name},
            )
        )
    return infos


def _selection_hint() -> str:
    selection = os.environ.get(LOAD_PLUGINS_ENV)
    if selection is None:
        return ""
    return (
        f" Note: {LOAD_PLUGINS_ENV}={selection!r} limits which installed plugins are loaded; "
        "unset it to load them all."
    )


def default_store_url() -> str:
    """The store :func:`open_store` opens when given no URL and ``MEMCORE_STORE`` is unset.

    :returns: ``jsonl://`` and the per-user data folder: ``$XDG_DATA_HOME/memcore``,
        or ``~/.local/share/memcore`` when ``XDG_DATA_HOME`` is unset or relative.
    """
    data_home = Path(os.environ.get("XDG_DATA_HOME", ""))
    base = data_home if data_home.is_absolute() else Path.home() / ".local" / "share"
    return "jsonl://" + (base / "memcore").as_posix()


def url_scheme(url: str) -> str:
    """The scheme of a store URL: what precedes ``://``, lowercased.

    :raises InvalidInputError: if ``url`` is not of the form ``scheme://...``.
    """
    if not isinstance(url, str):
        raise InvalidInputError(f"a store URL is a string, got {type(url).__name__}")
    scheme, separator, _ = url.partition("://")
    if not separator or not _URL_SCHEME.fullmatch(scheme):
        raise InvalidInputError(
            f"malformed store URL {url!r}: expected scheme://location, "
            "such as memory:// or jsonl:///path/to/folder"
        )
    return scheme.lower()


def open_store(url: str | None = None) -> Store:
    """Open the store a URL names, through the plugin registered for its scheme.

    :param url: such as ``memory://``, ``jsonl:///var/lib/memcore`` or
        ``qdrant+http://localhost:6333``; the scheme is case-insensitive and
        handed to the store lowercased. ``None``: the ``MEMCORE_STORE``
        environment variable if set and not empty, else :func:`default_store_url`.
    :returns: the open store; close it (or use it as a context manager) when done.
    :raises InvalidInputError: if the URL is malformed, or the store rejects it.
    :raises UnknownPluginError: if no loaded plugin handles the scheme; the
        message lists the installed schemes and the package to install.
    :raises PluginError: if plugins conflict or are broken.
    """
    if url is None:
        url = os.environ.get(STORE_URL_ENV) or default_store_url()
    scheme = url_scheme(url)
    url = scheme + url[len(scheme) :]
    registry = store_classes()
    registration = registry.get(scheme)
    if registration is None:
        installed = ", ".join(f"{known}://" for known in registry) or "none"
        package = STORE_PACKAGES.get(scheme)
        advice = (
            f"Install the plugin with `pip install {package}`."
            if package
            else "Install the plugin that provides it; `memcore plugins` lists what is loaded."
        )
        raise UnknownPluginError(
            f"no installed memcore plugin opens {scheme}:// URLs (installed schemes: {installed}). "
            f"{advice}{_selection_hint()}"
        )
    return registration.store_class.from_url(url)


def _check_options(name: str, factory: Callable[..., Embedder], options: dict[str, Any]) -> None:
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(**options)
    except TypeError as exc:
        accepted = ", ".join(signature.parameters) or "none"
        raise InvalidInputError(
            f"invalid options for the embedder {name!r}: {exc} (options it accepts: {accepted})"
        ) from None


def open_embedder(name: str, **options: Any) -> Embedder:
    """Create the embedder registered under ``name``.

    :param name: such as ``"hash"`` or ``"sentence-transformers/all-MiniLM-L6-v2"``.
    :param options: passed to the embedder's factory, such as ``dim=384`` for ``hash``.
    :returns: the embedder.
    :raises UnknownPluginError: if no loaded plugin provides ``name``; the
        message lists the installed embedders and the package to install.
    :raises InvalidInputError: if the factory does not accept ``options``.
    :raises PluginError: if plugins conflict, or the factory returns no embedder.
    """
    if not isinstance(name, str):
        raise InvalidInputError(f"an embedder name is a string, got {type(name).__name__}")
    registry = embedder_factories()
    registration = registry.get(name)
    if registration is None:
        installed = ", ".join(registry) or "none"
        package = next((pkg for prefix, pkg in EMBEDDER_PACKAGES.items() if name.startswith(prefix)), None)
        advice = (
            f"Install it with `pip install '{package}'`."
            if package
            else "Install the plugin that provides it; `memcore plugins` lists what is loaded."
        )
        raise UnknownPluginError(
            f"no installed memcore plugin provides the embedder {name!r} (installed embedders: {installed}). "
            f"{advice}{_selection_hint()}"
        )
    _check_options(name, registration.factory, options)
    embedder = registration.factory(**options)
    if not isinstance(embedder, Embedder):
        raise PluginError(
            f"the factory of the embedder {name!r} (plugin {registration.plugin!r}) returned "
            f"{type(embedder).__name__}, which lacks name, dim or embed()"
        )
    return embedder
