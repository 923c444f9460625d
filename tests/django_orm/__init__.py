"""A small Django project whose model Runwright's tools read in real workers
(tests/e2e/test_app_databases.py): its one database is the test's own
Postgres, the one ``RUNWRIGHT_DATABASE_URL`` names."""
