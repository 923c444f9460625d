"""``PostgresStore`` by aggregate; the class itself is in ``store/postgres.py``."""
