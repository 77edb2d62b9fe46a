"""PostgreSQL: bad input, failover, faults through a proxy, timeouts, TLS, PgBouncer."""
