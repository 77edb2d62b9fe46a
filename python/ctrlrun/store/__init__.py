"""The store: one ``Store`` over the core's SQLite or PostgreSQL backend, with its parts
(``records`` the effect rows, ``approvals`` the approval requests, ``receipts`` the receipt
chains, ``retention`` pruning), each converting what the core returns in one place."""
