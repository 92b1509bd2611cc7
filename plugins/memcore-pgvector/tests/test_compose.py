"""docker/pgvector/compose.yaml: the server the README sends users to."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

PLUGIN = Path(__file__).resolve().parents[1]
COMPOSE = PLUGIN.parents[1] / "docker" / "pgvector" / "compose.yaml"


def _service() -> dict[str, Any]:
    service: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())["services"]["postgres"]
    return service


def test_compose_publishes_the_port_and_database_the_readme_names() -> None:
    published = {int(entry.split(":")[0]) for entry in _service()["ports"]}
    named = re.findall(
        r"postgresql://(\w+):PASSWORD@localhost:(\d+)/(\w+)", (PLUGIN / "README.md").read_text()
    )
    assert named
    environment = _service()["environment"]
    for user, port, database in named:
        assert int(port) in published
        assert (user, database) == (environment["POSTGRES_USER"], environment["POSTGRES_DB"])


def test_compose_runs_pgvector_0_8_and_keeps_its_data_in_a_volume() -> None:
    assert re.fullmatch(r"pgvector/pgvector:0\.8\.\d+-pg\d+", _service()["image"])
    named = [volume.split(":")[0] for volume in _service()["volumes"]]
    assert all(name in yaml.safe_load(COMPOSE.read_text())["volumes"] for name in named)
