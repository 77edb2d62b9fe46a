"""``ctrlrun console``: a small web page where people, signed in as approver accounts kept in
the store, answer approval requests, settle ambiguous effects and read receipts.

Modules: :mod:`~ctrlrun.console.passwords` (hashing), :mod:`~ctrlrun.console.accounts` (approver
accounts in the store), :mod:`~ctrlrun.console.sessions` (server-side sessions and CSRF),
:mod:`~ctrlrun.console.ratelimit` (sign-in attempts), :mod:`~ctrlrun.console.identity` (who a
request comes from), :mod:`~ctrlrun.console.pages` (templates), the ``routes_*`` modules (what
each page does), :mod:`~ctrlrun.console.app` (the ASGI app) and :mod:`~ctrlrun.console.listen`
(where and how it serves).
"""
