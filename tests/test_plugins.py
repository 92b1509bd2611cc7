"""The plugin registry: hooks, loading, lookups, errors, and the hash embedder."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pluggy
import pytest

import memcore
from memcore import builtin_plugins, hookspecs
from memcore.bench import hookspecs as bench_hookspecs
from memcore.bench.overhead import raw_client
from memcore.bench.workloads import opened
from memcore.embedders.base import Embedder
from memcore.embedders.hashing import MAX_DIM, HashEmbedder
from memcore.errors import InvalidInputError, PluginError, UnknownPluginError
from memcore.hookspecs import hookimpl
from memcore.plugin_manager import BUILTIN_PLUGIN_NAME, get_plugin_manager
from memcore.plugins import (
    EMBEDDER_PACKAGES,
    STORE_PACKAGES,
    default_store_url,
    embedder_factories,
    open_embedder,
    open_store,
    plugin_infos,
    store_classes,
    url_scheme,
)
from memcore.store import BaseStore
from memcore.stores.in_memory import InMemoryStore
from memcore.stores.jsonl import JsonlStore

SPEC_MODULES = (hookspecs, bench_hookspecs)
SPEC_MODULE_OF = {
    name: module
    for module in SPEC_MODULES
    for name in vars(module)
    if pluggy.PluginManager("memcore").parse_hookspec_opts(module, name)
}
HOOK_NAMES = sorted(SPEC_MODULE_OF)
REGISTRATION_HOOKS = ["memcore_register_embedders", "memcore_register_stores"]
"""The hooks memcore's built-ins implement (the others are for plugins only)."""


@pytest.fixture
def register_plugin() -> Iterator[Callable[[object, str], None]]:
    """Register plugin objects by name; all are unregistered after the test."""
    manager = get_plugin_manager()
    names: list[str] = []

    def register(plugin: object, name: str) -> None:
        manager.register(plugin, name=name)
        names.append(name)

    try:
        yield register
    finally:
        for name in names:
            manager.unregister(name=name)


# -- each hook, through a registered plugin object --------------------------------------------


def test_hook_memcore_register_stores(stub_plugin: Any) -> None:
    registry = store_classes()
    assert registry["stub"].store_class is stub_plugin.store_class
    assert registry["stub+extra"].store_class is stub_plugin.store_class
    assert registry["stub"].plugin == stub_plugin.name
    with open_store("stub+extra://anything") as store:
        assert isinstance(store, stub_plugin.store_class)


def test_hook_memcore_bench_raw_client(register_plugin: Callable[[object, str], None]) -> None:
    baseline = object()

    class _Baseline:
        @hookimpl
        def memcore_bench_raw_client(self, url: str) -> object | None:
            return baseline if url.startswith("memory://") else None

    assert raw_client("memory://") is None, "the built-ins have no raw client: they are memcore's own"
    register_plugin(_Baseline(), "baseline")
    assert raw_client("memory://") is baseline
    assert raw_client("jsonl:///tmp/x") is None


def test_hook_memcore_add_hookspecs(fresh_plugins: pytest.MonkeyPatch) -> None:
    manager = get_plugin_manager()
    assert {"memcore_bench_raw_client", "memcore_bench_discard"} <= {
        name for name in dir(manager.hook) if name.startswith("memcore_")
    }
    assert manager.hook.memcore_bench_raw_client.spec is not None
    # The contract itself knows no benchmark: the bench plugin added those hooks.
    assert not hasattr(hookspecs, "memcore_bench_raw_client")


def test_hook_memcore_bench_discard(
    register_plugin: Callable[[object, str], None], tmp_path: Path, recwarn: pytest.WarningsRecorder
) -> None:
    discarded: list[str] = []

    class _Dropper:
        @hookimpl
        def memcore_bench_discard(self, url: str, name: str) -> bool | None:
            if not url.startswith("jsonl://"):
                return None
            discarded.append(name)
            shutil.rmtree(url.removeprefix("jsonl://"))
            return True

    register_plugin(_Dropper(), "dropper")
    with opened(f"jsonl://{tmp_path}/{{name}}"):
        [made] = list(tmp_path.iterdir())
    assert discarded == [made.name] and made.name.startswith("memcore_bench_")
    assert not list(tmp_path.iterdir())
    assert not [w for w in recwarn if "remove it yourself" in str(w.message)]


def test_hook_memcore_register_embedders(stub_plugin: Any) -> None:
    registration = embedder_factories()["stub-hash"]
    assert registration.plugin == stub_plugin.name
    embedder = open_embedder("stub-hash", dim=16)
    assert isinstance(embedder, HashEmbedder)
    assert embedder.dim == 16


# -- built-ins ---------------------------------------------------------------------------------


def test_builtins_register_through_the_hooks() -> None:
    registry = store_classes()
    assert registry["memory"].store_class is InMemoryStore
    assert registry["jsonl"].store_class is JsonlStore
    assert {registry["memory"].plugin, registry["jsonl"].plugin} == {BUILTIN_PLUGIN_NAME}
    assert embedder_factories()["hash"].plugin == BUILTIN_PLUGIN_NAME


def test_open_store_memory() -> None:
    with open_store("memory://") as store:
        assert isinstance(store, InMemoryStore)
        assert memcore.open_store is open_store


def test_open_store_jsonl(tmp_path: Path) -> None:
    with open_store(f"jsonl://{tmp_path}/memories") as store:
        assert isinstance(store, JsonlStore)
    assert (tmp_path / "memories").is_dir()


def test_open_store_scheme_is_case_insensitive() -> None:
    with open_store("MEMORY://") as store:
        assert isinstance(store, InMemoryStore)


def test_open_store_defaults_to_memcore_store(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMCORE_STORE", "memory://")
    with open_store() as store:
        assert isinstance(store, InMemoryStore)


def test_open_store_defaults_to_jsonl_in_the_user_data_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("MEMCORE_STORE", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert default_store_url() == f"jsonl://{tmp_path}/memcore"
    with open_store() as store:
        assert isinstance(store, JsonlStore)
    assert (tmp_path / "memcore").is_dir()


@pytest.mark.parametrize("data_home", [None, "", "relative/dir"])
def test_default_store_url_falls_back_to_local_share(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, data_home: str | None
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    if data_home is None:
        monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    else:
        monkeypatch.setenv("XDG_DATA_HOME", data_home)
    assert default_store_url() == f"jsonl://{tmp_path}/.local/share/memcore"


@pytest.mark.parametrize("url", ["memory", "", "://x", "1mem://", "mem ory://", "memory:/x", "/var/lib/x"])
def test_malformed_url_is_invalid_input(url: str) -> None:
    with pytest.raises(InvalidInputError, match="malformed store URL"):
        open_store(url)


def test_url_must_be_a_string() -> None:
    with pytest.raises(InvalidInputError, match="string"):
        open_store(b"memory://")  # type: ignore[arg-type]


def test_url_scheme() -> None:
    assert url_scheme("qdrant+http://localhost:6333") == "qdrant+http"
    assert url_scheme("postgresql://user@host/db") == "postgresql"


# -- unknown stores and embedders --------------------------------------------------------------


@pytest.mark.parametrize(("scheme", "package"), sorted(STORE_PACKAGES.items()))
def test_unknown_known_scheme_names_the_package(scheme: str, package: str) -> None:
    with pytest.raises(UnknownPluginError) as caught:
        open_store(f"{scheme}://user:secret@host/db")
    message = str(caught.value)
    assert f"pip install {package}" in message
    assert "installed schemes: jsonl://, memory://" in message
    assert "secret" not in message
    assert isinstance(caught.value, KeyError)


def test_unknown_scheme_lists_installed_ones() -> None:
    with pytest.raises(KeyError) as caught:
        open_store("nosuch://x")
    message = str(caught.value)
    assert message.startswith("no installed memcore plugin opens nosuch:// URLs")
    assert "installed schemes: jsonl://, memory://" in message
    assert "memcore plugins" in message
    assert "pip install" not in message


def test_unknown_plugin_message_mentions_a_restricting_selection() -> None:
    with pytest.raises(UnknownPluginError, match="MEMCORE_LOAD_PLUGINS=''"):
        open_store("qdrant:///tmp/q")


@pytest.mark.parametrize(("prefix", "package"), sorted(EMBEDDER_PACKAGES.items()))
def test_unknown_embedder_names_the_package(prefix: str, package: str) -> None:
    with pytest.raises(UnknownPluginError) as caught:
        open_embedder(prefix + "all-mpnet-base-v2")  # a model no installed plugin provides
    message = str(caught.value)
    assert f"pip install '{package}'" in message
    assert "installed embedders: hash" in message
    assert isinstance(caught.value, KeyError)


def test_unknown_embedder_lists_installed_ones() -> None:
    with pytest.raises(UnknownPluginError) as caught:
        open_embedder("nosuch")
    assert "installed embedders: hash" in str(caught.value)
    assert "pip install" not in str(caught.value)


# -- conflicts and broken plugins --------------------------------------------------------------


class _StoreRegistering:
    def __init__(self, *store_classes: object) -> None:
        self.store_classes = store_classes

    @hookimpl
    def memcore_register_stores(self, register: Callable[[object], None]) -> None:
        for store_class in self.store_classes:
            register(store_class)


class _EmbedderRegistering:
    def __init__(self, name: object, factory: object) -> None:
        self.name, self.factory = name, factory

    @hookimpl
    def memcore_register_embedders(self, register: Callable[[object, object], None]) -> None:
        register(self.name, self.factory)


class _OtherMemoryStore(InMemoryStore):
    name: ClassVar[str] = "other-memory"
    schemes: ClassVar[tuple[str, ...]] = ("memory",)


class _TwiceStore(InMemoryStore):
    name: ClassVar[str] = "twice"
    schemes: ClassVar[tuple[str, ...]] = ("twice",)


def test_two_plugins_claiming_a_scheme_conflict(register_plugin: Callable[[object, str], None]) -> None:
    register_plugin(_StoreRegistering(_OtherMemoryStore), "intruder")
    with pytest.raises(PluginError) as caught:
        open_store("jsonl:///tmp/unused")
    message = str(caught.value)
    assert "'memory'" in message
    assert f"'{BUILTIN_PLUGIN_NAME}'" in message
    assert "'intruder'" in message
    assert "_OtherMemoryStore" in message


def test_two_plugins_claiming_an_embedder_conflict(register_plugin: Callable[[object, str], None]) -> None:
    register_plugin(_EmbedderRegistering("hash", HashEmbedder), "hash-again")
    with pytest.raises(PluginError, match=f"'hash'.*'{BUILTIN_PLUGIN_NAME}'.*'hash-again'"):
        open_embedder("hash")


def test_registering_the_same_class_twice_is_harmless(register_plugin: Callable[[object, str], None]) -> None:
    register_plugin(_StoreRegistering(_TwiceStore, _TwiceStore), "twice")
    assert store_classes()["twice"].plugin == "twice"


def test_plugin_infos_lists_conflicts_rather_than_failing(
    register_plugin: Callable[[object, str], None],
) -> None:
    register_plugin(_StoreRegistering(_OtherMemoryStore), "intruder")
    stores = {info.name: info.stores for info in plugin_infos()}
    assert "memory" in stores[BUILTIN_PLUGIN_NAME]
    assert stores["intruder"] == {"memory": f"{__name__}._OtherMemoryStore"}


class _Abstract(BaseStore):
    name: ClassVar[str] = "abstract"
    schemes: ClassVar[tuple[str, ...]] = ("abstract",)


class _NoSchemes(InMemoryStore):
    schemes: ClassVar[tuple[str, ...]] = ()


class _BadScheme(InMemoryStore):
    schemes: ClassVar[tuple[str, ...]] = ("Bad_Scheme",)


@pytest.mark.parametrize(
    ("registered", "expected"),
    [
        (object, "subclass of memcore.store.BaseStore"),
        (InMemoryStore(), "subclass of memcore.store.BaseStore"),
        (_Abstract, "abstract methods unimplemented: _add"),
        (_NoSchemes, "non-empty tuple of lowercase URL schemes"),
        (_BadScheme, "non-empty tuple of lowercase URL schemes"),
    ],
)
def test_invalid_store_registration_names_the_plugin(
    register_plugin: Callable[[object, str], None], registered: object, expected: str
) -> None:
    register_plugin(_StoreRegistering(registered), "broken")
    with pytest.raises(PluginError, match="'broken'") as caught:
        store_classes()
    assert expected in str(caught.value)


@pytest.mark.parametrize(
    ("name", "factory", "expected"),
    [("", HashEmbedder, "non-empty"), (" x", HashEmbedder, "surrounding spaces"), ("x", 42, "not callable")],
)
def test_invalid_embedder_registration_names_the_plugin(
    register_plugin: Callable[[object, str], None], name: str, factory: object, expected: str
) -> None:
    register_plugin(_EmbedderRegistering(name, factory), "broken")
    with pytest.raises(PluginError, match=expected) as caught:
        embedder_factories()
    assert "'broken'" in str(caught.value)


def test_a_failing_hook_becomes_a_plugin_error(register_plugin: Callable[[object, str], None]) -> None:
    class Failing:
        @hookimpl
        def memcore_register_stores(self, register: Callable[[object], None]) -> None:
            raise ImportError("No module named 'qdrant_client'")

    register_plugin(Failing(), "failing")
    with pytest.raises(PluginError, match=r"'failing' failed while registering stores.*qdrant_client"):
        open_store("memory://")


def test_factory_must_return_an_embedder(register_plugin: Callable[[object, str], None]) -> None:
    register_plugin(_EmbedderRegistering("not-an-embedder", object), "odd")
    with pytest.raises(PluginError, match="'odd'"):
        open_embedder("not-an-embedder")


# -- embedders ---------------------------------------------------------------------------------


def test_open_embedder_hash() -> None:
    embedder = open_embedder("hash")
    assert isinstance(embedder, Embedder)
    assert (embedder.name, embedder.dim) == ("hash", 256)
    assert open_embedder("hash", dim=384).dim == 384
    assert memcore.open_embedder is open_embedder


def test_open_embedder_refuses_unknown_options() -> None:
    with pytest.raises(InvalidInputError, match=r"dims.*options it accepts: dim"):
        open_embedder("hash", dims=3)


def test_open_embedder_name_must_be_a_string() -> None:
    with pytest.raises(InvalidInputError):
        open_embedder(None)  # type: ignore[arg-type]


def test_hash_embedder_shape_dtype_and_unit_rows() -> None:
    texts = ["The cat sat on the mat.", "", "?!", "Ünïcödé wörds", "a " * 500]
    matrix = HashEmbedder(dim=64).embed(texts)
    assert matrix.shape == (5, 64)
    assert matrix.dtype == np.float32
    assert np.allclose(np.linalg.norm(matrix, axis=1), 1.0, atol=1e-6)
    assert (np.abs(matrix).max(axis=1) > 0).all()
    assert HashEmbedder().embed([]).shape == (0, 256)


def test_hash_embedder_is_deterministic_and_case_insensitive() -> None:
    first = HashEmbedder().embed(["Hello world", "hello WORLD"])
    second = HashEmbedder().embed(["Hello world"])
    assert np.array_equal(first[0], first[1])
    assert np.array_equal(first[0], second[0])


def test_hash_embedder_rows_without_words_share_the_bias_direction() -> None:
    empty, punctuation = HashEmbedder().embed(["", "?! ..."])
    assert np.array_equal(empty, punctuation)


def test_hash_embedder_is_identical_across_processes() -> None:
    script = (
        "import sys; from memcore.embedders.hashing import HashEmbedder; "
        "sys.stdout.write(HashEmbedder(dim=32).embed(['same text, other process']).tobytes().hex())"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={"PYTHONHASHSEED": seed, "PATH": ""},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {HashEmbedder(dim=32).embed(["same text, other process"]).tobytes().hex()}


def test_hash_embedder_ranks_overlapping_text_higher() -> None:
    query, related, unrelated = HashEmbedder().embed(
        ["where do penguins live", "penguins live in Antarctica", "the stock market fell today"]
    )
    assert float(query @ related) > float(query @ unrelated) + 0.2


@pytest.mark.parametrize("dim", [0, -1, MAX_DIM + 1, True, 2.0, "8"])
def test_hash_embedder_refuses_bad_dimensions(dim: object) -> None:
    with pytest.raises(InvalidInputError, match="dim"):
        HashEmbedder(dim=dim)  # type: ignore[arg-type]


@pytest.mark.parametrize("texts", ["a bare string", ["ok", 3], None])
def test_hash_embedder_refuses_bad_texts(texts: object) -> None:
    with pytest.raises(InvalidInputError):
        HashEmbedder().embed(texts)  # type: ignore[arg-type]


# -- loading: MEMCORE_LOAD_PLUGINS, tracing, check_pending, thread safety ----------------------


@pytest.fixture
def make_distribution(
    fresh_plugins: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Callable[..., tuple[str, str]]]:
    """Install fake distributions (a dist-info folder and a module) on ``sys.path``.

    Discovery then goes through importlib.metadata exactly as for a pip-installed plugin.
    """
    fresh_plugins.syspath_prepend(str(tmp_path))
    modules: list[str] = []

    def make(dist_name: str, entry_name: str, source: str = "") -> tuple[str, str]:
        module = f"fake_plugin_{uuid.uuid4().hex[:8]}"
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
        info = tmp_path / f"{dist_name.replace('-', '_')}-1.2.3.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist_name}\nVersion: 1.2.3\n")
        (info / "entry_points.txt").write_text(f"[memcore]\n{entry_name} = {module}\n")
        modules.append(module)
        return entry_name, module

    try:
        yield make
    finally:
        for module in modules:
            sys.modules.pop(module, None)


FAKE_PLUGIN_SOURCE = """
    from memcore import hookimpl

    @hookimpl
    def memcore_register_embedders(register):
        from memcore.embedders.hashing import HashEmbedder
        register("fake-hash", HashEmbedder)
"""


def _loaded_names() -> set[str]:
    return {name for name, plugin in get_plugin_manager().list_name_plugin() if plugin is not None}


@pytest.mark.parametrize(
    ("selection", "loaded"),
    [
        (None, True),
        ("", False),
        (" , ", False),
        ("fake-entry", True),
        ("fake-dist", True),
        ("Fake_Dist", True),
        ("fake-entry,fake-dist", True),
    ],
)
def test_load_plugins_selection(
    make_distribution: Callable[..., tuple[str, str]],
    fresh_plugins: pytest.MonkeyPatch,
    selection: str | None,
    loaded: bool,
) -> None:
    make_distribution("fake-dist", "fake-entry", FAKE_PLUGIN_SOURCE)
    if selection is None:
        fresh_plugins.delenv("MEMCORE_LOAD_PLUGINS", raising=False)
    else:
        fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", selection)
    assert ("fake-entry" in _loaded_names()) is loaded
    assert ("fake-hash" in embedder_factories()) is loaded
    assert BUILTIN_PLUGIN_NAME in _loaded_names()


def test_loaded_plugin_reports_its_distribution(
    make_distribution: Callable[..., tuple[str, str]], fresh_plugins: pytest.MonkeyPatch
) -> None:
    make_distribution("fake-dist", "fake-entry", FAKE_PLUGIN_SOURCE)
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "fake-entry")
    [info] = [info for info in plugin_infos() if info.name == "fake-entry"]
    assert (info.distribution, info.version) == ("fake-dist", "1.2.3")
    assert info.hooks == ("memcore_register_embedders",)
    assert info.embedders == {"fake-hash": "memcore.embedders.hashing.HashEmbedder"}
    assert info.stores == {}


def test_unknown_name_in_load_plugins_is_an_error(
    make_distribution: Callable[..., tuple[str, str]], fresh_plugins: pytest.MonkeyPatch
) -> None:
    make_distribution("fake-dist", "fake-entry", FAKE_PLUGIN_SOURCE)
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "fake-entry, nosuch")
    for _ in range(2):  # a failed load is not cached: the next call fails the same way
        with pytest.raises(PluginError) as caught:
            get_plugin_manager()
        assert "'nosuch'" in str(caught.value)
        assert "'fake-entry' (fake-dist 1.2.3)" in str(caught.value)
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "fake-entry")
    assert "fake-entry" in _loaded_names()


def test_unknown_hook_fails_check_pending(
    make_distribution: Callable[..., tuple[str, str]], fresh_plugins: pytest.MonkeyPatch
) -> None:
    make_distribution(
        "typo-dist",
        "typo",
        """
        from memcore import hookimpl

        @hookimpl
        def memcore_register_store(register):
            pass
        """,
    )
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "typo")
    with pytest.raises(PluginError, match=r"'typo' implements a hook .*'memcore_register_store'"):
        get_plugin_manager()


def test_plugin_that_fails_to_import_is_named(
    make_distribution: Callable[..., tuple[str, str]], fresh_plugins: pytest.MonkeyPatch
) -> None:
    make_distribution("broken-dist", "broken", "import not_an_installed_module_xyz\n")
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "broken")
    with pytest.raises(PluginError, match=r"'broken' \(broken-dist 1.2.3\).*not_an_installed_module_xyz"):
        get_plugin_manager()


def test_two_distributions_with_one_plugin_name_are_an_error(
    make_distribution: Callable[..., tuple[str, str]], fresh_plugins: pytest.MonkeyPatch
) -> None:
    make_distribution("first-dist", "same-name", FAKE_PLUGIN_SOURCE)
    make_distribution("second-dist", "same-name", FAKE_PLUGIN_SOURCE)
    fresh_plugins.setenv("MEMCORE_LOAD_PLUGINS", "same-name")
    with pytest.raises(PluginError, match=r"two installed distributions.*'same-name'"):
        get_plugin_manager()


def test_trace_plugins_writes_hook_calls_to_stderr(
    fresh_plugins: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fresh_plugins.setenv("MEMCORE_TRACE_PLUGINS", "1")
    store_classes()
    err = capsys.readouterr().err
    assert "memcore_register_stores" in err
    assert "finish memcore_register_stores" in err


def test_no_tracing_by_default(fresh_plugins: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fresh_plugins.delenv("MEMCORE_TRACE_PLUGINS", raising=False)
    store_classes()
    assert capsys.readouterr().err == ""


def test_concurrent_first_use_loads_once(fresh_plugins: pytest.MonkeyPatch) -> None:
    managers: list[object] = []
    barrier = threading.Barrier(8)

    def load() -> None:
        barrier.wait()
        managers.append(get_plugin_manager())

    threads = [threading.Thread(target=load) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(managers) == 8
    assert len({id(manager) for manager in managers}) == 1


# -- the listing and the package surface -------------------------------------------------------


def test_plugin_infos_for_builtins_and_registered_plugins(stub_plugin: Any) -> None:
    infos = {info.name: info for info in plugin_infos()}
    builtin = infos[BUILTIN_PLUGIN_NAME]
    assert (builtin.distribution, builtin.version) == (None, None)
    assert builtin.hooks == tuple(REGISTRATION_HOOKS)
    assert builtin.stores == {
        "memory": "memcore.stores.in_memory.InMemoryStore",
        "jsonl": "memcore.stores.jsonl.JsonlStore",
    }
    assert builtin.embedders == {
        "hash": "memcore.embedders.hashing.HashEmbedder",
        "sentence-transformers/all-MiniLM-L6-v2": (
            "memcore.embedders.sentence_transformers.SentenceTransformerEmbedder"
        ),
    }
    stub = infos[stub_plugin.name]
    assert set(stub.stores) == {"stub", "stub+extra"}
    assert stub.as_dict()["embedders"] == {"stub-hash": "memcore.embedders.hashing.HashEmbedder"}


def test_package_exports() -> None:
    for name in memcore.__all__:
        assert getattr(memcore, name) is not None
    assert memcore.hookimpl is hookimpl
    assert issubclass(memcore.errors.UnknownPluginError, KeyError)
    with pytest.raises(AttributeError):
        memcore.no_such_name  # type: ignore[attr-defined]  # noqa: B018


def test_importing_memcore_is_cheap() -> None:
    script = (
        "import sys, memcore; "
        "heavy = {'numpy', 'pydantic', 'pluggy', 'memcore.stores.in_memory'} & set(sys.modules); "
        "print(sorted(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -- meta-tests: every hook is documented, implemented by the built-ins, and tested ------------


def test_hookspecs_exist() -> None:
    assert [
        "memcore_add_hookspecs",
        "memcore_bench_discard",
        "memcore_bench_raw_client",
        *REGISTRATION_HOOKS,
    ] == HOOK_NAMES
    assert SPEC_MODULE_OF["memcore_bench_raw_client"] is bench_hookspecs


@pytest.mark.parametrize("hook_name", HOOK_NAMES)
def test_hookspec_is_documented(hook_name: str) -> None:
    spec = getattr(SPEC_MODULE_OF[hook_name], hook_name)
    doc = inspect.getdoc(spec) or ""
    assert "Called" in doc
    for parameter in inspect.signature(spec).parameters:
        assert f":param {parameter}:" in doc
    assert ":returns:" in doc


@pytest.mark.parametrize("hook_name", REGISTRATION_HOOKS)
def test_hookspec_is_implemented_by_the_builtins(hook_name: str) -> None:
    callers = get_plugin_manager().get_hookcallers(builtin_plugins) or []
    assert hook_name in {caller.name for caller in callers}


@pytest.mark.parametrize("hook_name", HOOK_NAMES)
def test_hookspec_has_a_test(hook_name: str) -> None:
    assert callable(globals().get(f"test_hook_{hook_name}")), f"add a test named test_hook_{hook_name}"
