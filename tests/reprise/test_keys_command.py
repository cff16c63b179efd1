"""`reprise keys`: admin keys, expiry, list, revoke, rotate, webhook secret rotation; `reprise flower`
refuses an open listener; and no secret reaches a log."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from celery import Celery
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from core.errors import WebhookVerificationError
from core.settings import Settings, get_settings
from db.engine import session_scope
from db.keys import rotate_webhook_secret, signing_secrets
from db.tenants import get_tenant_by_name
from jobs.webhooks import signature_headers, verify
from reprise.cli import app
from reprise.commands.stack import FLOWER_MAX_TASKS

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(api_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[CliRunner]:
    monkeypatch.setenv("REPRISE_DATABASE_URL", api_settings.sqlalchemy_url)
    get_settings.cache_clear()
    yield CliRunner()
    get_settings.cache_clear()


def _invoke(cli: CliRunner, *args: str) -> Any:
    result = cli.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def test_an_admin_key_reads_global_figures_and_keys_list_never_shows_a_key(
    cli: CliRunner, client: TestClient
) -> None:
    issued = json.loads(_invoke(cli, "keys", "create", "--admin", "--expires-in", "2h", "--json").stdout)
    assert issued["admin"] is True and issued["name"] == "admin"
    expires = datetime.fromisoformat(issued["expires_at"])
    assert timedelta(hours=1, minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=2)
    auth = {"Authorization": f"Bearer {issued['api_key']}"}
    assert client.get("/v1/stats", headers=auth).json()["scope"] == "global"

    listed = json.loads(_invoke(cli, "keys", "list", "--tenant", "admin", "--json").stdout)
    mine = next(row for row in listed if row["id"] == issued["key_id"])
    assert mine["admin"] is True and mine["state"] == "active"
    assert issued["api_key"] not in json.dumps(listed) and issued["api_key"].startswith(mine["prefix"])

    rotated = _invoke(cli, "keys", "rotate", issued["key_id"], "--overlap", "1h").stdout
    new_key = rotated.split("api key:")[1].split()[0]
    assert client.get("/v1/stats", headers={"Authorization": f"Bearer {new_key}"}).json()["scope"] == "global"
    _invoke(cli, "keys", "revoke", issued["key_id"])
    assert client.get("/v1/stats", headers=auth).status_code == 401


def test_bad_key_commands_say_the_fix(cli: CliRunner) -> None:
    unknown = cli.invoke(app, ["keys", "revoke", "00000000-0000-0000-0000-000000000000"])
    assert unknown.exit_code == 2 and "reprise keys list" in unknown.output
    malformed = cli.invoke(app, ["keys", "revoke", "not-an-id"])
    assert malformed.exit_code == 2 and "reprise keys list" in malformed.output
    duration = cli.invoke(app, ["keys", "create", "--tenant", "t", "--expires-in", "soon"])
    assert duration.exit_code == 2 and "30d" in duration.output
    nameless = cli.invoke(app, ["keys", "create"])
    assert nameless.exit_code == 2 and "--admin" in nameless.output


def test_a_rotated_webhook_secret_signs_with_both_during_the_overlap(
    cli: CliRunner, api_settings: Settings
) -> None:
    first = json.loads(_invoke(cli, "keys", "create", "--tenant", "hooks-rotate", "--json").stdout)
    old = first["webhook_secret"]
    out = _invoke(cli, "keys", "rotate-webhook-secret", "--tenant", "hooks-rotate", "--overlap", "1h").stdout
    new = out.split("webhook secret:")[1].split()[0]
    assert new != old
    body, now = b'{"type":"generation.completed"}', int(datetime.now(UTC).timestamp())
    with session_scope(api_settings) as session:
        tenant = get_tenant_by_name(session=session, name="hooks-rotate")
        assert tenant is not None
        during = signing_secrets(tenant)
        after = signing_secrets(tenant, now=datetime.now(UTC) + timedelta(hours=2))
    assert during == [new, old] and after == [new]
    headers = signature_headers(during, msg_id="msg_1", timestamp=now, body=body)
    assert len(headers["webhook-signature"].split(" ")) == 2
    verify(old, headers, body)  # a receiver that has not switched yet
    verify(new, headers, body)  # one that has
    later = signature_headers(after, msg_id="msg_1", timestamp=now, body=body)
    with pytest.raises(WebhookVerificationError):
        verify(old, later, body)
    with session_scope(api_settings) as session, pytest.raises(Exception, match="reprise keys list"):
        rotate_webhook_secret(session, tenant="no-such-tenant", overlap=timedelta(hours=1))


def test_flower_refuses_to_listen_openly_without_basic_auth(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRISE_FLOWER_ADDRESS", "0.0.0.0")
    monkeypatch.delenv("REPRISE_FLOWER_BASIC_AUTH", raising=False)
    get_settings.cache_clear()
    refused = cli.invoke(app, ["flower"])
    assert refused.exit_code == 2 and "REPRISE_FLOWER_BASIC_AUTH" in refused.output


def test_no_secret_reaches_a_log(
    cli: CliRunner, client: TestClient, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPRISE_FLOWER_BASIC_AUTH", "ops:flower-password-123")
    get_settings.cache_clear()
    caplog.set_level(logging.DEBUG)
    issued = json.loads(_invoke(cli, "keys", "create", "--tenant", "log-safety", "--json").stdout)
    auth = {"Authorization": f"Bearer {issued['api_key']}"}
    client.post("/v1/generations", json={"prompt": "p", "webhook": "http://127.0.0.1:9/h"}, headers=auth)
    client.get("/v1/generations", headers={"Authorization": f"Bearer {issued['api_key']}x"})  # a 401
    settings = get_settings()
    logging.getLogger("reprise.test").info("settings: %r", settings)  # what a careless log line shows
    secrets = [issued["api_key"], issued["webhook_secret"], "flower-password-123"]
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert logged  # something was logged at all
    for secret in secrets:
        assert secret not in logged


def test_flower_keeps_a_bounded_number_of_tasks(cli: CliRunner, monkeypatch: pytest.MonkeyPatch) -> None:
    """Its memory grew through the soak with Flower's default of 100,000 tasks kept."""
    monkeypatch.delenv("REPRISE_FLOWER_ADDRESS", raising=False)
    get_settings.cache_clear()
    started: list[list[str]] = []
    monkeypatch.setattr(Celery, "start", lambda self, argv: started.append(argv))
    assert cli.invoke(app, ["flower", "--port", "5599"]).exit_code == 0
    assert started == [["flower", "--port=5599", "--address=127.0.0.1", f"--max_tasks={FLOWER_MAX_TASKS}"]]
