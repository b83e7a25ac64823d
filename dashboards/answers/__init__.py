"""What the pages and the JSON API (``/api/v1/<name>``) answer, one module per subject: each
takes the filters and the viewer and returns plain data, limited to what that viewer may see.
The pages render these answers; the API sends them as JSON, so the two never disagree."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dashboards.context import Viewer
from dashboards.filters import Filters

#: An answer: (filters, viewer, the request's other parameters) → a JSON-able document.
Answer = Callable[[Filters, Viewer, Mapping[str, str]], dict[str, Any]]
