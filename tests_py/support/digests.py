"""What a digest looks like."""

from __future__ import annotations

import re

DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
