"""Notifications: webhooks told when an approval is requested, decided, expires or escalates,
and when an effect becomes ``ambiguous`` (docs/notifications.md).

``events`` (what happened), ``bodies`` (the Slack and JSON bodies), ``signing`` (HMAC-SHA256
of a JSON body), ``delivery`` (one daemon thread per process, a bounded queue, retries),
``hooks`` (what the call path and the store call when an event happens) and ``watcher`` (the
time-based events, run by the console). This package imports none of them. They import the
store, never the other way round: ``hooks`` is told of a decision through the hook it adds to
``ctrlrun.store.approvals`` (``ctrlrun`` imports it), and ``watcher`` reads the store."""
