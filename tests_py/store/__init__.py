"""The stores: races, receipts, retention, schema migration, SQLite files, the store choice."""
