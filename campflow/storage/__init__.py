"""The DuckDB store: schema and migrations, batched writes, read-only queries."""
