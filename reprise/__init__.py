"""The roof: the `reprise` command line and local operations (embedded Postgres and Redis, the
supervisor of `reprise run`, running migrations). May import every floor; nothing imports it."""
