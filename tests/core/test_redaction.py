from __future__ import annotations

from core.redaction import redacted_url


def test_a_password_never_survives_and_the_rest_of_the_url_does() -> None:
    url = "postgresql+psycopg://reprise:s3cr3t@db.internal:5432/reprise?sslmode=require"
    shown = redacted_url(url)
    assert "s3cr3t" not in shown
    assert shown == "postgresql+psycopg://reprise:***@db.internal:5432/reprise?sslmode=require"
    assert redacted_url("redis://:hunter2@[::1]:6379/0") == "redis://:***@[::1]:6379/0"
    assert redacted_url("redis://127.0.0.1:63799/0") == "redis://127.0.0.1:63799/0"


def test_each_url_of_a_sentinel_list_is_redacted() -> None:
    url = "sentinel://:hunter2@10.0.0.1:26379/0;sentinel://:hunter2@10.0.0.2:26379"
    assert redacted_url(url) == "sentinel://:***@10.0.0.1:26379/0;sentinel://:***@10.0.0.2:26379"
