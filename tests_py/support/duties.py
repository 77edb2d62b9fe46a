"""A PostgreSQL store with its duties apart (docs/roles.md): a schema owned by the session's
role, an agent role and an approver role of their own with passwords, given their duties by
the real ``ctrlrun store roles`` command, and each role's URL and raw SQL."""

from __future__ import annotations

import os
import secrets
import subprocess
from dataclasses import dataclass
from typing import Optional

from throwaway.pgserver import _find_bin


@dataclass
class Role:
    name: str
    password: str


class Duties:
    """The owner's, the agent's and the approver's URLs on one fresh schema."""

    def __init__(self, pg, schema: str) -> None:
        self.pg = pg
        self.schema = schema
        tag = secrets.token_hex(4)
        self.agent = Role(f"agent_{tag}", secrets.token_hex(12))
        self.approver = Role(f"approver_{tag}", secrets.token_hex(12))
        for role in (self.agent, self.approver):
            pg.psql(f"CREATE ROLE {role.name} LOGIN PASSWORD '{role.password}'")

    def url(self, role: Optional[Role] = None) -> str:
        """The store's URL for ``role`` (the owner's when ``None``)."""
        if role is None:
            return self.pg.url(self.schema)
        return (
            f"postgresql://{role.name}:{role.password}@{self.pg.host}:{self.pg.port}/"
            f"{self.pg.db}?schema={self.schema}"
        )

    @property
    def owner_url(self) -> str:
        return self.url()

    @property
    def agent_url(self) -> str:
        return self.url(self.agent)

    @property
    def approver_url(self) -> str:
        return self.url(self.approver)

    def sql(self, role: Role, sql: str) -> subprocess.CompletedProcess:
        """``sql`` run by psql connected as ``role`` (its outcome, never raised)."""
        env = dict(os.environ, PGPASSWORD=role.password)
        return subprocess.run(
            [
                _find_bin("psql"),
                "-h",
                self.pg.host,
                "-p",
                str(self.pg.port),
                "-U",
                role.name,
                "-d",
                self.pg.db,
                "-v",
                "ON_ERROR_STOP=1",
                "-Atqc",
                f'SET search_path = "{self.schema}"; {sql}',
            ],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )

    def drop(self) -> None:
        self.pg.drop_schema(self.schema)
        for role in (self.agent, self.approver):
            self.pg.psql(f"DROP OWNED BY {role.name}; DROP ROLE IF EXISTS {role.name}")
