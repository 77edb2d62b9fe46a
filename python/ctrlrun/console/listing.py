"""What a list page shows, read from its URL: the view (which states), the filters (action,
key prefix, who asked), and the page (a cursor); and the links to the next page and to
another view with the same filters. The store filters, orders and cuts (``list_approvals``,
``list_effects``): a page reads at most ``PAGE + 1`` rows, whatever the history holds."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from urllib.parse import urlencode

from starlette.requests import Request

__all__ = ["PAGE", "View", "BadView", "view_of", "paged"]

#: Rows a list page shows.
PAGE = 50
#: The longest filter text read from a URL (characters).
MAX_FILTER = 500


class BadView(Exception):
    """A list URL the console cannot show (its message says what was wrong)."""


@dataclass(frozen=True)
class View:
    """One list page: ``view`` (a name of ``views``), the filters, and the cursor."""

    path: str
    view: str
    action: Optional[str] = None
    prefix: Optional[str] = None
    requested_by: Optional[str] = None
    after: Optional[str] = None

    def link(self, **changes: Any) -> str:
        """This page's URL with ``changes`` (``after=None`` for the first page)."""
        v = replace(self, **changes)
        query = {
            name: value
            for name, value in (
                ("view", v.view),
                ("action", v.action),
                ("prefix", v.prefix),
                ("requested_by", v.requested_by),
                ("after", v.after),
            )
            if value
        }
        return v.path + ("?" + urlencode(query) if query else "")

    @property
    def filtered(self) -> bool:
        return bool(self.action or self.prefix or self.requested_by)


def _text(request: Request, name: str) -> Optional[str]:
    """The filter ``name`` as given (a key may start or end with a space: nothing is
    stripped), ``None`` when empty."""
    value = request.query_params.get(name, "")
    if len(value) > MAX_FILTER:
        raise BadView(f"The {name} filter is longer than {MAX_FILTER} characters.")
    return value or None


def view_of(request: Request, views: Sequence[str], filters: Sequence[str]) -> View:
    """The page a list URL asks for: ``view`` one of ``views`` (the first when not given),
    only the ``filters`` this list has."""
    view = request.query_params.get("view") or views[0]
    if view not in views:
        raise BadView(f"There is no view {view[:40]!r}: choose one of {', '.join(views)}.")
    known = {name: _text(request, name) for name in filters}
    # The cursor holds a row's whole key, which has no length limit (the request line has).
    after = request.query_params.get("after") or None
    return View(request.url.path, view, after=after, **known)


def paged(
    view: View, read: Callable[[int], List[Any]], cursor: Callable[[Any], str]
) -> Tuple[List[Any], Optional[str]]:
    """The page's rows (``read(limit)`` asks for one more than a page, to know whether there
    is a next one), and the link to the next page, if any."""
    rows = read(PAGE + 1)
    if len(rows) <= PAGE:
        return rows, None
    rows = rows[:PAGE]
    return rows, view.link(after=cursor(rows[-1]))


def shown_count(n: int, cap: int) -> str:
    """``3,000``, or ``10,000+`` when the count reached its cap."""
    return f"{n:,}+" if n >= cap else f"{n:,}"


def context(view: View, rows: List[Any], next_link: Optional[str], **more: Any) -> Dict[str, Any]:
    """What a list template gets: the view, its rows, the next page's link."""
    return {"view": view, "rows": rows, "next_link": next_link, "page_size": PAGE, **more}
