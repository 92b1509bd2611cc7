"""docker/chroma/compose.yaml: the server the README sends users to when one machine is not enough."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

PLUGIN = Path(__file__).resolve().parents[1]
COMPOSE = PLUGIN.parents[1] / "docker" / "chroma" / "compose.yaml"


def _service() -> dict[str, Any]:
    compose = yaml.safe_load(COMPOSE.read_text())
    service: dict[str, Any] = compose["services"]["chroma"]
    return service


def test_compose_publishes_the_port_the_readme_names() -> None:
    published = {int(entry.split(":")[0]) for entry in _service()["ports"]}
    readme_ports = {
        int(p) for p in re.findall(r"chroma\+http://localhost:(\d+)", (PLUGIN / "README.md").read_text())
    }
    assert readme_ports and readme_ports <= published


def test_compose_persists_the_data_volume_the_readme_names() -> None:
    volumes = _service()["volumes"]
    assert any(volume.endswith(":/data") for volume in volumes)
    named = [volume.split(":")[0] for volume in volumes]
    assert all(name in yaml.safe_load(COMPOSE.read_text())["volumes"] for name in named)
    assert "/data" in (PLUGIN / "README.md").read_text()


def test_compose_image_matches_the_tested_client() -> None:
    import chromadb

    image = _service()["image"]
    assert image.startswith("chromadb/chroma:")
    assert image.split(":")[1].split(".")[:2] == chromadb.__version__.split(".")[:2]
