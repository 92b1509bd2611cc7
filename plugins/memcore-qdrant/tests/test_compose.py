"""The compose files in ``docker/qdrant/`` parse, and match what the plugin README tells users."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from memcore_qdrant.client_engine import MIN_SERVER_VERSION

PLUGIN = Path(__file__).resolve().parents[1]
COMPOSE = PLUGIN.parents[1] / "docker" / "qdrant"
README = (PLUGIN / "README.md").read_text()


def _services(name: str) -> dict[str, Any]:
    document = yaml.safe_load((COMPOSE / name).read_text())
    assert isinstance(document, dict)
    services: dict[str, Any] = document["services"]
    for service in services.values():
        assert str(service["image"]).startswith("qdrant/qdrant:")
    return services


@pytest.mark.parametrize("name", ["single-node.yml", "cluster.yml"])
def test_ports_and_volumes_are_the_ones_the_readme_gives(name: str) -> None:
    assert f"docker compose -f docker/qdrant/{name} up -d" in README
    for service_name, service in _services(name).items():
        for port in service["ports"]:
            assert f"`{port}`" in README, (
                f"{name}: {service_name} publishes {port}, the README does not say so"
            )
        for volume in service["volumes"]:
            assert f"`{volume}`" in README, (
                f"{name}: {service_name} mounts {volume}, the README does not say so"
            )


def test_the_single_node_serves_the_default_url() -> None:
    [node] = _services("single-node.yml").values()
    assert "6333:6333" in node["ports"]
    assert "qdrant+http://localhost:6333?collection=memcore" in README


def test_the_cluster_has_three_replicating_peers() -> None:
    services = _services("cluster.yml")
    assert len(services) == 3
    first, *others = services.values()
    for node in services.values():
        environment = node["environment"]
        assert environment["QDRANT__CLUSTER__ENABLED"] == "true"
        assert int(environment["QDRANT__STORAGE__COLLECTION__REPLICATION_FACTOR"]) >= 2
    assert "--uri http://qdrant-node-1:6335" in first["command"]
    for node in others:
        assert "--bootstrap http://qdrant-node-1:6335" in node["command"]
    published = [port.split(":")[0] for node in services.values() for port in node["ports"]]
    assert len(published) == len(set(published))


def _image_version(image: str) -> tuple[int, int, int]:
    tag = image.removeprefix("qdrant/qdrant:")
    found = re.fullmatch(r"v(\d+)\.(\d+)\.(\d+)", tag)
    assert found is not None, f"pin the Qdrant image to an exact version, not {image!r}"
    return int(found[1]), int(found[2]), int(found[3])


@pytest.mark.parametrize("name", ["single-node.yml", "cluster.yml"])
def test_the_image_is_a_server_the_plugin_works_with(name: str) -> None:
    client_major, client_minor = (int(part) for part in version("qdrant-client").split(".")[:2])
    for service_name, service in _services(name).items():
        major, minor, _ = _image_version(str(service["image"]))
        assert (major, minor) >= MIN_SERVER_VERSION, (
            f"{name}: {service_name} runs Qdrant {major}.{minor}, older than the "
            f"{MIN_SERVER_VERSION} the plugin needs (MatchSubstring, create_vector_name)"
        )
        assert (major, minor) == (client_major, client_minor), (
            f"{name}: {service_name} runs Qdrant {major}.{minor}; "
            f"qdrant-client is {client_major}.{client_minor}"
        )
