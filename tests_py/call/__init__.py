"""Protected calls: the decorator, binding, keys and fingerprints, the async runtime, leases, outcomes, results, replay and waits, errors and bad input."""
