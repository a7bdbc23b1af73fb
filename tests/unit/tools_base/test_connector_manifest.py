"""The Connector entries of @goondan/base agree with their modules, and the example validates."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

import tools_base
from bundle import load_bundle
from tests.support.chat_server import telegram_update
from tools_base.connectors import cli, telegram

ROOT = Path(__file__).resolve().parents[3]
MANIFEST = Path(tools_base.__file__).parent / "goondan.yaml"
CONNECTORS = {
    doc["metadata"]["name"]: doc
    for doc in yaml.safe_load_all(MANIFEST.read_text())
    if doc["kind"] == "Connector"
}
EXAMPLE = ROOT / "examples" / "telegram-bot" / "goondan.yaml"


def declared(connector: str, event: str) -> dict[str, Any]:
    events = {e["name"]: e for e in CONNECTORS[connector]["spec"]["events"]}
    return dict(events[event].get("properties", {}))


def test_each_entry_exports_an_async_run() -> None:
    assert {"telegram", "cli"} <= set(CONNECTORS)
    for name, module in (("telegram", telegram), ("cli", cli)):
        entry = (MANIFEST.parent / CONNECTORS[name]["spec"]["entry"]).resolve()
        assert entry == Path(module.__file__ or "").resolve()
        assert inspect.iscoroutinefunction(module.run)


def test_the_declared_events_are_the_ones_emitted() -> None:
    assert [e["name"] for e in CONNECTORS["telegram"]["spec"]["events"]] == [telegram.EVENT]
    assert [e["name"] for e in CONNECTORS["cli"]["spec"]["events"]] == [cli.EVENT]


def test_every_telegram_property_is_declared_and_the_required_ones_always_set() -> None:
    properties = declared("telegram", telegram.EVENT)
    photo = [{"file_id": "p", "file_unique_id": "u", "width": 1, "height": 1, "file_size": 1}]
    document = {"file_id": "d", "file_unique_id": "v", "file_name": "a.pdf", "file_size": 2}
    image_document = {**document, "mime_type": "image/png", "width": 3, "height": 4}
    update = telegram_update(1, "hi", caption="c")
    update["message"]["from"]["last_name"] = "Lee"
    update["message"]["chat"]["title"] = "T"
    seen: set[str] = set()
    for extra in ({}, {"photo": photo}, {"document": {**document, "mime_type": "text/x"}}):
        event = telegram.update_event({**update, "message": {**update["message"], **extra}})
        assert event is not None
        seen |= set(event.properties)
    event = telegram.update_event(telegram_update(2, document=image_document))
    assert event is not None
    seen |= set(event.properties)
    assert seen == set(properties)
    required = {k for k, v in properties.items() if not v.get("optional")}
    assert required == {"update_id", "chat_id"}


def test_the_telegram_example_validates() -> None:
    loaded = load_bundle(EXAMPLE, check_handlers=False)
    assert loaded is not None
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(EXAMPLE), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["valid"] is True


def test_a_connection_to_an_unknown_package_connector_does_not_validate(tmp_path: Path) -> None:
    broken = tmp_path / "goondan.yaml"
    broken.write_text(
        EXAMPLE.read_text().replace(
            "connectorRef: { kind: Connector, name: telegram,",
            "connectorRef: { kind: Connector, name: telegrm,",
        )
    )
    (tmp_path / "prompt.md").write_text((EXAMPLE.parent / "prompt.md").read_text())
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator", "validate", str(broken), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 4
    errors = json.loads(done.stdout)["errors"]
    assert [e["code"] for e in errors] == ["E_CONFIG_REF_NOT_FOUND"]
    assert "Connector/telegrm" in errors[0]["message"]
